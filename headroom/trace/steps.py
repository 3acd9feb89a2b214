"""The chunked-prefill engine (trace.batching.max_batched_tokens): engine steps as vLLM's scheduler
packs them, each step a token budget shared by decodes and prefill chunks.

The model, in full (docs/traces.md says the same in prose):

- Steps run on the decode clock: step n at n * decode_step_ns. A request is eligible from the first
  step strictly after its arrival. At most max_batch requests are running (prefilling or decoding).
- Each step, in this order: sequences that have generated all their tokens retire; every decoding
  sequence takes one token of the budget; running prefills continue in admission order, each
  taking min(its remaining prompt, the budget left); then eligible requests are admitted first-come
  first-served while the budget lasts and fewer than max_batch run, their first chunk likewise.
  A request's prefill starts after its prefix-cached tokens (headroom.trace.prefix_cache).
- Each prefill chunk is one invocation: batch 1, q_len = the chunk's tokens, kv_len = every token
  of the prompt so far (cached + earlier chunks + this one), bottom-right causal. All decoding
  sequences of a step are one decode invocation. A step holding both records its chunks as
  `mixed-prefill` and its decode as `mixed-decode`; otherwise `prefill` or `decode`.
- A sequence whose last chunk ran at step s decodes from step s + 1 for `generated` steps, its
  kv_len running from context + 1 to context + generated (as in the unchunked model).

Not modelled: one varlen launch over a mixed batch (vLLM runs a step's chunks and decodes as one
attention call; here each chunk and the decode batch are separate invocations), preemption, and
the time a step takes (steps are on a fixed clock).
"""

from __future__ import annotations

import heapq

import numpy as np

from headroom.trace import requests as continuous
from headroom.trace.requests import DECODE, PREFILL, Requests, Stream, check_stream_size, decode_ticks

MIXED_PREFILL, MIXED_DECODE = 2, 3  # step codes (headroom.trace.requests.STEPS)


class Engine:
    """The scheduler's state; run() walks the steps, jumping over stretches where only a constant
    decode batch runs (nothing to prefill, nobody admitted until the next retirement or arrival)."""

    def __init__(self, eligible, context, cached, generated, max_batch: int, budget: int, keep_bases: bool):
        if budget <= max_batch:
            raise ValueError(
                f"config key 'trace.batching.max_batched_tokens': {budget} must be more than "
                f"trace.batching.max_batch = {max_batch} (every running decode takes one token of it)"
            )
        self.eligible, self.context, self.cached, self.generated = eligible, context, cached, generated
        self.max_batch, self.budget, self.keep_bases = max_batch, budget, keep_bases
        self.active: dict[int, int] = {}  # decoding request -> kv base (kv_len at step t: base + t)
        self.finishing: list[tuple[int, int]] = []  # heap of (first step no longer active, request)
        self.prefilling: list[list[int]] = []  # [request, tokens of its prompt in the KV so far]
        self.next = 0
        self.chunks: list[tuple[int, int, int, int, int]] = []  # (step, request, q_len, kv_len, code)
        self.segments: tuple[list, ...] = ([], [], [], [], [], [], [])  # + bases, mixed

    def _prefill_step(self, tick: int) -> list[tuple[int, int, int]]:
        """This step's chunks (request, q_len, kv_len): running prefills first, then admissions."""
        left = self.budget - len(self.active)
        out = []
        for entry in self.prefilling:
            if left == 0:
                break
            take = min(int(self.context[entry[0]]) - entry[1], left)
            entry[1] += take
            left -= take
            out.append((entry[0], take, entry[1]))
        n = len(self.eligible)
        while (
            left and self.next < n and self.eligible[self.next] <= tick and self._running() < self.max_batch
        ):
            r = self.next
            self.next += 1
            done = int(self.cached[r])
            take = min(int(self.context[r]) - done, left)
            self.prefilling.append([r, done + take])
            left -= take
            out.append((r, take, done + take))
        return out

    def _running(self) -> int:
        return len(self.active) + len(self.prefilling)

    def _stop(self, tick: int, chunks: list, end_tick: int | None) -> int:
        """The step after the stretch that starts at tick and keeps the same decode batch."""
        if chunks:
            return tick + 1
        stop = self.finishing[0][0]
        if self._running() < self.max_batch and self.next < len(self.eligible):
            stop = min(stop, int(self.eligible[self.next]))
        return stop if end_tick is None else min(stop, end_tick)

    def _segment(self, start: int, stop: int, mixed: bool) -> None:
        bases = np.fromiter(self.active.values(), np.int64, len(self.active))
        kept = bases if self.keep_bases else None  # (per-sequence kv_lens only)
        for part, value in zip(
            self.segments,
            (start, stop, len(bases), int(bases.max()), int(bases.sum()), kept, mixed),
            strict=True,
        ):
            part.append(value)

    def _finish_prefills(self, tick: int) -> None:
        """Prefills whose last chunk ran at this step decode from the next."""
        for r, done in [e for e in self.prefilling if e[1] == int(self.context[e[0]])]:
            self.active[r] = done - tick  # kv_len done + 1 at step tick + 1
            heapq.heappush(self.finishing, (tick + 1 + int(self.generated[r]), r))
        self.prefilling = [e for e in self.prefilling if e[1] < int(self.context[e[0]])]

    def run(self, end_tick: int | None) -> Engine:
        tick = 0
        while end_tick is None or tick < end_tick:
            while self.finishing and self.finishing[0][0] <= tick:
                del self.active[heapq.heappop(self.finishing)[1]]
            chunks = self._prefill_step(tick)
            if not self.active and not chunks:
                if self.next >= len(self.eligible):
                    break
                tick = max(tick + 1, int(self.eligible[self.next]))
                continue
            stop = self._stop(tick, chunks, end_tick)
            if self.active:
                self._segment(tick, stop, bool(chunks))
            code = MIXED_PREFILL if self.active else PREFILL
            self.chunks += [(tick, r, q, kv, code) for r, q, kv in chunks]
            self._finish_prefills(tick)
            tick = stop
        return self


def stream(engine: Engine, decode_step_ns: int) -> Stream:
    """The engine's invocations as a Stream, in time order (a step's chunks, in request order, then
    its decode)."""
    *segments, bases, mixed = engine.segments
    check_stream_size(len(engine.chunks), int(np.sum(np.subtract(segments[1], segments[0], dtype=np.int64))))
    ticks, d_batch, d_max, d_mean, d_segment = decode_ticks(*segments)
    c = np.asarray(engine.chunks, dtype=np.int64).reshape(-1, 5)
    p, d = len(c), len(ticks)
    d_step = np.where(np.asarray(mixed, dtype=bool)[d_segment], MIXED_DECODE, DECODE).astype(np.int8)
    out = Stream(
        time_ns=np.concatenate([c[:, 0], ticks]) * decode_step_ns,
        phase=np.concatenate([np.full(p, PREFILL, np.int8), np.full(d, DECODE, np.int8)]),
        batch=np.concatenate([np.ones(p, np.int64), d_batch]),
        request=np.concatenate([c[:, 1], np.full(d, -1, np.int64)]),
        kv_max=np.concatenate([c[:, 3], d_max]),
        kv_mean=np.concatenate([c[:, 3].astype(np.float64), d_mean]),
        q_len=np.concatenate([c[:, 2], np.ones(d, np.int64)]),
        step=np.concatenate([c[:, 4].astype(np.int8), d_step]),
        segment=np.concatenate([np.full(p, -1, np.int64), d_segment]),
        bases=tuple(bases) if engine.keep_bases else (),
    )
    return out.take(np.lexsort((out.request, out.phase, out.time_ns)))


def simulate(
    requests: Requests,
    *,
    max_batch: int,
    decode_step_ns: int,
    end_ns: int | None = None,
    max_batched_tokens: int | None = None,
    kv_lens: bool = False,
) -> Stream:
    """The invocation stream of the engine the trace config names: with max_batched_tokens (vLLM's
    per-step token budget) this module's chunked-prefill engine, else the continuous-batching one
    of headroom.trace.requests (requests.simulate: every prompt prefilled whole at arrival)."""
    if max_batched_tokens is None:
        return continuous.simulate(
            requests, max_batch=max_batch, decode_step_ns=decode_step_ns, end_ns=end_ns, kv_lens=kv_lens
        )
    n, eligible, cached, end_tick = continuous.engine_clock(requests, max_batch, decode_step_ns, end_ns)
    engine = Engine(
        eligible[:n], requests.context, cached, requests.generated, max_batch, max_batched_tokens, kv_lens
    )
    return stream(engine.run(end_tick), decode_step_ns)
