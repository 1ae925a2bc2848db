"""`SpecFlipRouter`: a Ray Serve request router (`ray.serve.request_router.RequestRouter`) that
sends latency-class requests to speculation-ON replicas and throughput-class ones to OFF replicas.

Ray Serve runs it where requests to the replica deployment are routed: in Ray's `LLMRouter`, the
ingress request router HAProxy asks for a replica per POST (direct streaming, docs/architecture.md
"Data flow"), where a request's args are the body parsed into a namespace (forwarded with
`routing.class_routing` only) and its class header arrives as Serve's session id; a handle call's
args are the parsed request and Ray's `RawRequestInfo` with the HTTP headers. The app sets it
through the replica deployment's `request_router_config` (deployments.app). Replicas publish
`ReplicaStats` through Serve's `record_routing_stats` (deployments.replica.server); `policy.routing`
ranks. Within a rank, Ray's own machinery probes queue lengths and takes the shortest queue with
room.

Prefix-cache affinity: the router remembers which replica it sent each prompt to (the first
`affinity_chars` characters, in Ray's own prefix tree, kept in this process) and hands
`policy.routing.rank` the replicas holding a new request's longest known prefix; the ranking keeps
them first only within the request's mode and a load gap. Each routing process (each LLMRouter
replica) learns from what it routed itself.

Serve pickles this module by value (RequestRouterConfig), so it holds no state of its own: what it
routed is counted in `deployments.routing.journal.JOURNAL` (imported by reference, one per
process), whose counts it pushes to the policy actor, which serves them on every replica's `/metrics`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from deployments.ray_compat import PrefixTree
from deployments.routing import journal as routing_journal
from deployments.routing.journal import UNKNOWN_MODE, Routed
from policy.routing import ClassRule, RankReason, ReplicaStats, RequestClass, RoutingConfig, classify, rank
from policy.types import SpecMode

__all__ = ["SpecFlipRouter", "prompt_text", "request_class_of"]

PUSH_EVERY_S = 1.0  # routing counts to the policy actor at most this often
TREE_CHARS_PER_REPLICA = 400_000  # characters remembered per replica (least recent evicted), as Ray's default


def request_class_of(rule: ClassRule, args: Sequence[Any], session: str | None = None) -> RequestClass:
    """The class of a request: `args` are (request, RawRequestInfo) in a replica, or (namespace of
    the body,) / () in Ray's LLMRouter, which sees no headers but the one HAProxy forwards as Serve's
    session id (`session`: the class header's value, RAY_SERVE_SESSION_ID_HEADER_KEY)."""
    body = args[0] if args else None
    info = args[1] if len(args) > 1 else None
    headers = getattr(info, "headers", None)
    if not isinstance(headers, Mapping):
        headers = {rule.class_header: session} if session else None
    return classify(rule, body, headers)


def _session(pending: PendingRequest | None) -> str | None:
    value = getattr(getattr(pending, "metadata", None), "session_id", None)
    return value if isinstance(value, str) and value else None


def _text(value: Any) -> str:
    """The text of a message's content: a string, or the `text` of its parts (dicts or objects)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = (p.get("text") if isinstance(p, Mapping) else getattr(p, "text", None) for p in value)
        return "".join(t for t in parts if isinstance(t, str))
    return ""


def prompt_text(body: Any, limit: int) -> str:
    """The first `limit` characters of a request's prompt as text (completions: `prompt`, chat:
    the messages' contents in order); "" for token-id prompts and bodies without either."""
    prompt = getattr(body, "prompt", None)
    if isinstance(prompt, str):
        return prompt[:limit]
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "".join(prompt)[:limit]
    messages = getattr(body, "messages", None)
    if not isinstance(messages, list):
        return ""
    out: list[str] = []
    size = 0
    for m in messages:
        piece = _text(m.get("content") if isinstance(m, Mapping) else getattr(m, "content", None))
        out.append(piece)
        size += len(piece)
        if size >= limit:
            break
    return "".join(out)[:limit]


def _request_key(pending: PendingRequest | None) -> str | None:
    metadata = getattr(pending, "metadata", None)
    key = getattr(metadata, "internal_request_id", None)
    return key if isinstance(key, str) else None


def _replica_tag(replica_id: ReplicaID) -> str:
    return str(replica_id.unique_id)


class SpecFlipRouter(RequestRouter):
    """No FIFOMixin on purpose: with it, a replica chosen for one request is handed to the oldest
    pending request (whatever its class); without it, Serve matches the request that asked."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.class_rule = ClassRule.model_validate(kwargs.get("class_rule") or {})
        self.routing = RoutingConfig.model_validate(kwargs.get("routing") or {})
        self._rng = random.Random()
        self._clock = time.time
        # parsed stats per replica, kept while Serve hands the same stats dict (it replaces the
        # dict when a replica publishes new stats): parsing is most of a decision's cost
        self._parsed: dict[ReplicaID, tuple[Any, ReplicaStats | None]] = {}
        self._tree: Any = PrefixTree() if self.routing.prefix_affinity else None
        # request id -> prefix holders its ranking saw (oldest first: the ones never routed go first)
        # request key -> (the tags that held its prefix at ranking, its prompt text): read once per request
        self._holders: OrderedDict[str, tuple[frozenset[str], str]] = OrderedDict()
        self._recorded: OrderedDict[str, bool] = OrderedDict()  # requests whose pick was recorded
        self._actor_name: str | None = kwargs.get("policy_actor")  # where routing counts go
        self._actor_namespace: str | None = kwargs.get("policy_namespace")
        self._actor: Any = None
        self._pushed_at = float("-inf")
        self._push_warned = False
        self._push_scheduled = False

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        tree = getattr(self, "_tree", None)
        if tree is not None:  # forget what replicas gone from the deployment held
            live = {_replica_tag(r.replica_id) for r in replicas}
            gone = [t for t in list(tree.tenant_to_char_count) if t not in live]
            if gone:
                tree.remove_tenants(gone)

    # -- one routing iteration ------------------------------------------------------------
    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        """The ranks. Ray's ingress request router (the HAProxy path) takes the first replica of
        the first rank without probing or reserving, and never reports where the request went
        (`on_request_routed` is for handle calls): so that pick is recorded here."""
        ranks, cls, _ = self.rank_candidates(candidate_replicas, pending_request)
        chosen = next((rank[0] for rank in ranks if rank), None)
        if chosen is not None and pending_request is not None:
            self._record(pending_request, chosen.replica_id, cls=cls)  # classified once per request
        return ranks

    def rank_candidates(
        self, candidates: Sequence[RunningReplica], pending_request: PendingRequest | None
    ) -> tuple[list[list[RunningReplica]], RequestClass, RankReason]:
        """The ranks Serve tries in order, the request's class and why (sync: the benchmark times it)."""
        args = pending_request.args if pending_request is not None else []
        cls = request_class_of(self.class_rule, args, _session(pending_request))
        stats = [self._stats_of(r) for r in candidates]
        cache = self.replica_queue_len_cache
        loads = []
        for r, s in zip(candidates, stats, strict=True):
            queued = cache.get(r.replica_id)  # Serve's own count of requests sent, when fresh
            loads.append(float(queued) if queued is not None else float(s.load) if s is not None else 0.0)
        try:
            holders = self._prefix_holders(candidates, pending_request)
        except Exception:  # noqa: BLE001 - affinity only orders replicas: never fail a routing decision
            self._affinity_broken()
            holders = []
        ranking = rank(cls, stats, self._clock(), self.routing, loads=loads, rng=self._rng, affinity=holders)
        if ranking.reason is RankReason.STALE:
            return [self._power_of_two(candidates)], cls, ranking.reason
        return [[candidates[i] for i in r] for r in ranking.ranks], cls, ranking.reason

    def _prefix_holders(
        self, candidates: Sequence[RunningReplica], pending: PendingRequest | None
    ) -> list[int]:
        """Indices of the candidates that were sent this request's longest known prompt prefix,
        when it covers at least `affinity_min_match` of the prompt (kept for on_request_routed)."""
        text = self._prompt_text(pending)
        if not text:
            return []
        tags = [_replica_tag(r.replica_id) for r in candidates]
        matched, holders = self._tree.prefix_match(text, tags)
        if not holders or len(matched) < self.routing.affinity_min_match * len(text):
            holders = []
        key = _request_key(pending)
        if key is not None:
            self._holders[key] = (frozenset(holders), text)
            if len(self._holders) > 4096:  # requests Serve never reported routed (cancelled): the
                self._holders.popitem(last=False)  # oldest goes, not every one in flight
        held = set(holders)
        return [i for i, t in enumerate(tags) if t in held]

    def _push_later(self) -> None:
        self._push_scheduled = False
        self._push_counts()

    def _prompt_text(self, pending: PendingRequest | None) -> str:
        """The prompt text affinity matches ("" when affinity is off or the request has none)."""
        args = pending.args if pending is not None else None
        return prompt_text(args[0], self.routing.affinity_chars) if self._tree is not None and args else ""

    def _affinity_broken(self) -> None:
        """A failure inside the prefix tree: log it once and route without affinity from now on."""
        logging.getLogger(__name__).exception("prefix affinity failed; routing without it from now on")
        self._tree = None

    def _remember_prefix(self, replica_id: ReplicaID, pending: PendingRequest) -> bool | None:
        """Record that `replica_id` got this prompt; whether it had been sent its prefix before
        (None: no prompt text, or affinity off)."""
        key = _request_key(pending)
        ranked = self._holders.pop(key, None) if key is not None else None
        text = ranked[1] if ranked is not None else self._prompt_text(pending)
        if not text or self._tree is None:
            return None
        tag, now = _replica_tag(replica_id), self._clock()
        tree = self._tree
        if tag not in tree.tenant_to_char_count:
            tree.add_tenants([tag], now)
        if ranked is None:  # no ranking of this request on record: match now
            matched, _ = tree.prefix_match(text, [tag])
            hit = len(matched) >= self.routing.affinity_min_match * len(text)
        else:
            hit = tag in ranked[0]
        tree.insert(text, tag, now)
        excess = tree.tenant_to_char_count.get(tag, 0) - TREE_CHARS_PER_REPLICA
        if excess > 0:
            tree.evict_tenant_by_lru(tag, excess)
        return hit

    def _stats_of(self, replica: RunningReplica) -> ReplicaStats | None:
        raw = replica.routing_stats
        cached = self._parsed.get(replica.replica_id)
        if cached is not None and cached[0] is raw:
            return cached[1]
        parsed = ReplicaStats.from_routing_stats(raw)
        if len(self._parsed) > 4 * max(len(self.curr_replicas), 64):  # replicas come and go
            self._parsed.clear()
        self._parsed[replica.replica_id] = (raw, parsed)
        return parsed

    def _power_of_two(self, candidates: Sequence[RunningReplica]) -> list[RunningReplica]:
        """Serve's default policy: two random candidates; Serve takes the shorter queue."""
        if len(candidates) <= 2:
            return list(candidates)
        return self._rng.sample(list(candidates), 2)

    # -- bookkeeping --------------------------------------------------------------------------
    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        """Serve's hook after a handle call was routed (a reserved pick): recorded unless the
        ranking already recorded this request's pick (choose_replicas)."""
        key = _request_key(pending_request)
        if key is not None and self._recorded.pop(key, None) is not None:
            return
        self._record(pending_request, replica_id, remember=False)

    def _record(
        self,
        pending_request: PendingRequest,
        replica_id: ReplicaID,
        remember: bool = True,
        cls: RequestClass | None = None,
    ) -> None:
        """Journal the decision, teach the prefix tree, push the counts (at most once a second).
        `cls`: the request's class as the ranking read it (else read here)."""
        key = _request_key(pending_request)
        if remember and key is not None:
            self._recorded[key] = True
            if len(self._recorded) > 4096:  # picks Serve dispatched without calling on_request_routed
                self._recorded.popitem(last=False)
        replica = self.curr_replicas.get(replica_id)
        stats = self._stats_of(replica) if replica is not None else None
        fresh = stats is not None and self._clock() - stats.at <= self.routing.stale_after_s
        mode = stats.mode.value if stats is not None and fresh else UNKNOWN_MODE
        if cls is None:
            cls = request_class_of(self.class_rule, pending_request.args, _session(pending_request))
        want = cls.preferred_mode.value
        if not fresh:
            reason = RankReason.STALE
        elif mode == want:
            reason = RankReason.PREFERRED
        else:  # the other mode took it: overloaded, full, or absent preferred replicas
            others = [self._stats_of(r) for r in self.curr_replicas.values()]
            has_preferred = any(s is not None and s.mode is SpecMode(want) for s in others)
            reason = RankReason.IMBALANCED if has_preferred else RankReason.NO_PREFERRED
        try:
            hit = self._remember_prefix(replica_id, pending_request)
        except Exception:  # noqa: BLE001 - as above
            self._affinity_broken()
            hit = None
        routing_journal.JOURNAL.record(  # through the module: an instance would be pickled by value
            Routed(_replica_tag(replica_id), mode, cls, reason, prefix_hit=hit)
        )
        self._push_counts()

    def _push_counts(self) -> None:
        """Every PUSH_EVERY_S, hand the policy actor this process's routing counts (fire and forget:
        `/metrics` and `/specflip/status` show them from there). Never fails a routing decision."""
        now = self._clock()
        if self._actor_name is None:
            return
        wait_s = self._pushed_at + PUSH_EVERY_S - now
        if wait_s > 0:  # pushed a moment ago: once more when the second is up (the last burst's counts)
            if not self._push_scheduled:
                try:
                    asyncio.get_running_loop().call_later(wait_s, self._push_later)
                    self._push_scheduled = True
                except RuntimeError:  # not on an event loop (a test, or Serve's thread): next decision
                    pass
            return
        self._pushed_at = now
        try:
            import ray

            if self._actor is None:
                self._actor = ray.get_actor(self._actor_name, namespace=self._actor_namespace)
            self._actor.push_metrics.remote(f"router:{os.getpid()}", routing_journal.routed_families())
        except Exception:  # noqa: BLE001 - counts only: the actor may be restarting or not created yet
            if self._actor is not None or not self._push_warned:
                logging.getLogger(__name__).warning("routing counts not pushed", exc_info=True)
                self._push_warned = True
            self._actor = None
