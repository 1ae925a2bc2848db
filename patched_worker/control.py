"""The client end of speculation control: calls over SGLang's RPC socket, with a timeout.

SGLang's own `Engine.collective_rpc` blocks forever on the reply. Here each call waits at
most `timeout_s` (SpecFlipControlTimeout after that), and carries a sequence number the
scheduler echoes (install.py `handle_rpc_request`), so a late reply to a call that timed
out is recognised and dropped instead of being taken as the answer to the next call.
"""

from __future__ import annotations

import json
import threading
import time

import zmq
from sglang.srt.managers.io_struct import RpcReqInput, RpcReqOutput, sock_recv, sock_send

from patched_worker.errors import SpecFlipControlTimeout, SpeculationRpcError, UnsupportedSetup

__all__ = ["ControlChannel"]

_REMOTE_ERRORS = {"UnsupportedSetup": UnsupportedSetup}  # scheduler-side refusals users act on


class ControlChannel:
    """One zmq DEALER socket to the scheduler: one request in flight at a time."""

    def __init__(self, socket: zmq.Socket, timeout_s: float):
        self.socket, self.timeout_s = socket, float(timeout_s)
        self._lock = threading.Lock()
        self._seq = 0

    def call(self, call: str, method: str, timeout_s: float | None = None, **params) -> dict:
        """Run scheduler method `method` on every rank; `call` names it in errors. Returns its JSON result."""
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        with self._lock:
            self._seq += 1
            seq = self._seq
            sock_send(self.socket, RpcReqInput(method=method, parameters={**params, "_seq": seq}))
            deadline = time.monotonic() + timeout
            while True:
                left_ms = (deadline - time.monotonic()) * 1e3
                if left_ms <= 0 or not self.socket.poll(max(1, int(left_ms))):
                    raise SpecFlipControlTimeout(call, timeout)
                body = _reply_body(sock_recv(self.socket, flags=zmq.NOBLOCK))
                if body is not None and body.get("seq") == seq:
                    break  # anything else answers an earlier call that timed out
        if "error" in body:
            kind = str(body.get("type", ""))
            if kind in _REMOTE_ERRORS:
                raise _REMOTE_ERRORS[kind](body["error"])
            raise SpeculationRpcError(f"{kind}: {body['error']}")
        return body["result"]


def _reply_body(reply) -> dict | None:
    """The JSON body of a specflip reply, or None for anything else (an upstream RPC's empty reply)."""
    if not isinstance(reply, RpcReqOutput):
        return None
    try:
        body = json.loads(reply.message)
    except (TypeError, ValueError):
        return None
    return body if isinstance(body, dict) and "seq" in body else None
