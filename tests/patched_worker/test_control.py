"""Control calls time out with a clear error, and a late reply never answers the next call.

FAILURE INJECTION: a fake scheduler end of SGLang's RPC socket that answers late or not at
all (a hung or busy scheduler cannot be produced on demand with the real engine). Every
other engine test drives the same ControlChannel against the real scheduler.
"""

from __future__ import annotations

import json
import threading

import pytest

pytestmark = pytest.mark.engine


@pytest.fixture
def channel_and_fake_scheduler(tmp_path):
    import zmq

    from patched_worker.control import ControlChannel

    ctx = zmq.Context()
    endpoint = f"ipc://{tmp_path}/rpc"
    client = ctx.socket(zmq.DEALER)
    client.bind(endpoint)  # as sglang.Engine binds send_to_rpc
    fake_scheduler = ctx.socket(zmq.DEALER)
    fake_scheduler.connect(endpoint)
    yield ControlChannel(client, timeout_s=0.3), fake_scheduler
    client.close(linger=0)
    fake_scheduler.close(linger=0)
    ctx.term()


def _reply(sock, request, result=None, error=None, kind=""):
    from sglang.srt.managers.io_struct import RpcReqOutput, sock_send

    seq = request.parameters["_seq"]
    body = {"seq": seq, "result": result} if error is None else {"seq": seq, "error": error, "type": kind}
    sock_send(sock, RpcReqOutput(success=error is None, message=json.dumps(body)))


def test_a_call_without_reply_times_out_naming_the_call_and_the_limit(channel_and_fake_scheduler):
    from patched_worker.errors import SpecFlipControlTimeout

    channel, _ = channel_and_fake_scheduler
    with pytest.raises(
        SpecFlipControlTimeout,
        match=r"^set_speculation got no reply from the SGLang scheduler "
        r"within 0.3 s .*: retry, or raise control_timeout_s$",
    ):
        channel.call("set_speculation", "specflip_set_speculation", enabled=False)
    with pytest.raises(SpecFlipControlTimeout, match=r"^get_speculation_state got no reply .* within 0.05 s"):
        channel.call("get_speculation_state", "specflip_state", timeout_s=0.05)


def test_a_late_reply_is_dropped_and_the_next_call_gets_its_own(channel_and_fake_scheduler):
    from sglang.srt.managers.io_struct import sock_recv

    from patched_worker.errors import SpecFlipControlTimeout

    channel, fake = channel_and_fake_scheduler
    with pytest.raises(SpecFlipControlTimeout):
        channel.call("get_speculation_state", "specflip_state")
    late = sock_recv(fake)  # the scheduler gets to it after the caller gave up

    def scheduler():
        _reply(fake, late, result={"answer": "stale"})
        _reply(fake, sock_recv(fake), result={"answer": "fresh"})

    thread = threading.Thread(target=scheduler)
    thread.start()
    try:
        assert channel.call("get_speculation_state", "specflip_state", timeout_s=30) == {"answer": "fresh"}
    finally:
        thread.join()


def test_scheduler_refusals_keep_their_type(channel_and_fake_scheduler):
    from sglang.srt.managers.io_struct import sock_recv

    from patched_worker.errors import SpeculationRpcError, UnsupportedSetup

    channel, fake = channel_and_fake_scheduler
    cases = [
        (
            "warm_kv is not available for this draft (...): use full_extend",
            "UnsupportedSetup",
            UnsupportedSetup,
            r"^warm_kv is not available",
        ),
        (
            "this engine runs no EAGLE speculative decoding",
            "RuntimeError",
            SpeculationRpcError,
            r"^RuntimeError: this engine runs no EAGLE",
        ),
    ]
    for error, kind, exc, message in cases:
        thread = threading.Thread(
            target=lambda e=error, k=kind: _reply(fake, sock_recv(fake), error=e, kind=k)
        )
        thread.start()
        try:
            with pytest.raises(exc, match=message):
                channel.call("set_strategy", "specflip_configure", timeout_s=30, strategy="warm_kv")
        finally:
            thread.join()
