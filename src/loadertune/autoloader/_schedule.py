"""The probe schedule: the model-based guess, the candidates around it, and interleaved rounds.

A pure state machine fed with measurements (:class:`Measure`), so it is tested with
synthetic figures. The first segment loads in the training process (``num_workers=0``): its
waits are the load time of a batch and the gaps between them the step, which give the
guess, as the sweep's model guess does (``_guess.guess``, restated here because the sweeper
package sits above ``loadertune``). The candidates around the guess are then measured in
rounds, each round in a rotated order (A B C, B C A, C A B) so drift and the previous
setting's shutdown hit them alike.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

NEAR = 0.05  # a batch loaded within 5% of the step counts as hidden behind it
GUESS_STEPS = 8  # steps that load in the training process to measure load and step time
ROUNDS = 3  # interleaved rounds per candidate: the fewest a median interval needs
MIN_SEGMENT = 8  # fewest steps a probe segment is worth its worker start-up
MAX_CANDIDATES = 5
RACE = 1.5  # slower than a round's fastest by this factor in every round: no more rounds


@dataclass(frozen=True)
class Setting:
    """One point of the space AutoLoader tunes; the rest of the DataLoader stays as given."""

    num_workers: int = 0
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    pin_memory: bool = False

    @property
    def name(self) -> str:
        """Short label for reports and metric keys: ``w4``, ``w4_pf4``, ``w4_pin``."""
        parts = [f"w{self.num_workers}"]
        if self.num_workers and self.prefetch_factor not in (None, 2):
            parts.append(f"pf{self.prefetch_factor}")
        if self.pin_memory:
            parts.append("pin")
        return "_".join(parts)

    def __str__(self) -> str:
        return self.name

    @property
    def cost(self) -> float:
        """What a setting holds: workers first, then batches in flight, then pinned memory."""
        pf = self.prefetch_factor or 2
        return self.num_workers + 0.01 * pf * self.num_workers + 0.001 * self.pin_memory

    def fixed(self, fixed: dict[str, Any]) -> Setting:
        """This setting with the user's explicit values, which are never tuned."""
        keep = {k: v for k, v in fixed.items() if k in Setting.__dataclass_fields__}
        s = replace(self, **keep)
        if s.num_workers == 0:
            s = replace(s, prefetch_factor=None, persistent_workers=False)
        return s


@dataclass(frozen=True)
class Guess:
    """Workers predicted to hide loading behind the step, and the figures behind it."""

    workers: int
    load_ms: float
    step_ms: float
    load_cpu: float  # cores loading kept busy while it ran (1: decoding, 0: waiting on reads)
    step_cpu: float  # cores the step kept busy
    bound: str  # what set it


def guess_workers(
    load_ms: float, step_ms: float, load_cpu: float, step_cpu: float, cpus: int, cap: int
) -> Guess:
    """The fewest workers that bring a batch within NEAR of the best reachable time.

    Loading that is CPU work cannot beat the CPUs: every batch costs them load and step, so
    ``(load x load_cpu + step x step_cpu) / cpus`` is a floor no number of workers beats.
    """
    step = max(step_ms, 1e-3)
    floor = (load_ms * load_cpu + step_ms * step_cpu) / max(cpus, 1)
    if load_ms <= NEAR * step:
        return Guess(0, load_ms, step_ms, load_cpu, step_cpu, "loading is negligible")
    workers = max(1, math.ceil(load_ms / (max(step, floor) * (1 + NEAR))))
    bound = "cpus" if floor > step else "hides loading"
    if workers > cap:
        workers, bound = cap, "max_workers"
    return Guess(workers, load_ms, step_ms, load_cpu, step_cpu, bound)


def candidates(guess: int, cap: int, accelerator: bool, fixed: dict[str, Any]) -> list[Setting]:
    """Settings around the guess, most telling first: the guess, the default, twice and half
    the guess, a deeper prefetch; on an accelerator the guess without pinned memory too."""
    pin = accelerator
    if "num_workers" in fixed:
        w = fixed["num_workers"]
        raw = [Setting(w, 2, True, pin), Setting(w, 4, True, pin), Setting(w, 2, True, not pin)]
    else:
        g = max(guess, 1)
        sizes = [g, 0, min(2 * g, cap), max(1, g // 2)] if guess else [0, 1, min(2, cap)]
        raw = [Setting(w, 2 if w else None, w > 0, pin) for w in sizes]
        raw.append(Setting(g, 4, True, pin))
        if accelerator:
            raw.append(Setting(g, 2, True, False))
    out: list[Setting] = []
    for s in (r.fixed(fixed) for r in raw):
        if s not in out and (s.num_workers > 0 or s.pin_memory == pin or not accelerator):
            out.append(s)
    return out


@dataclass
class Measure:
    """One segment's figures, from the training loop's own steps."""

    setting: Setting
    round: int  # -1: not a compared segment (the guess, a recovery)
    steps: int = 0  # batches delivered
    counted_s: float = 0.0  # cycle time of the steady batches (after each start's look-ahead)
    counted: int = 0
    counted_wait_s: float = 0.0  # time in next() of the steady batches
    wait_s: float = 0.0  # time in next(), all batches
    step_s: float = 0.0  # time in the user's code, all batches
    wait_cpu_s: float = 0.0  # this process's CPU time while waiting
    step_cpu_s: float = 0.0
    startup_s: float = 0.0  # closing the previous loader and starting this one: the switch
    tree_cpu_s: float = 0.0  # CPU time of the process tree (workers included)
    peak_rss_mb: float = 0.0
    failed: str = ""  # why the probe was dropped

    @property
    def per_batch_s(self) -> float:
        """Steady time per batch: the training loop's cycle, look-ahead bursts left out."""
        if self.counted:
            return self.counted_s / self.counted
        return (self.wait_s + self.step_s) / max(self.steps, 1)

    @property
    def wait_share(self) -> float:
        total = self.wait_s + self.step_s
        return self.wait_s / total if total > 0 else 0.0


@dataclass
class Segment:
    """A stretch of training steps on one setting."""

    setting: Setting
    steps: int
    round: int = -1  # -1: not compared (the guess, a recovery after a dropped probe)


@dataclass
class Tuner:
    """What to probe next, from what was measured; settles when the budget is spent."""

    budget: int
    cpus: int
    max_workers: int
    accelerator: bool = False
    fixed: dict[str, Any] = field(default_factory=dict)
    forced: list[Setting] | None = None  # candidates given by the user instead of the guess
    measures: list[Measure] = field(default_factory=list)
    queue: list[Segment] = field(default_factory=list)
    dropped: dict[Setting, str] = field(default_factory=dict)  # failed probes
    raced: dict[Setting, str] = field(default_factory=dict)  # far slower: no more rounds
    guess: Guess | None = None
    started: bool = False

    def next(self) -> Segment | None:
        """The next segment to run, or None when tuning is over."""
        if not self.started:
            self.started = True
            first = Setting().fixed(self.fixed)
            if self.forced is not None or first.num_workers:
                fixed = candidates(0, self.max_workers, self.accelerator, self.fixed)
                self._plan_rounds(self.forced or fixed)
            else:
                return Segment(first, min(GUESS_STEPS, self.budget))
        self.queue = [
            s for s in self.queue if s.setting not in self.dropped and s.setting not in self.raced
        ]
        alive = {s.setting for s in self.queue if s.round >= 0} | {
            m.setting for m in self.measures if m.round >= 0
        }
        alive -= set(self.dropped) | set(self.raced)
        if len(alive) == 1 and not any(s.round < 0 for s in self.queue):
            self.queue = []  # one setting left in the race: nothing to compare it with
        return self.queue.pop(0) if self.queue else None

    def done(self, segment: Segment, measure: Measure) -> None:
        """Record a finished segment; after the guess segment, plan the rounds."""
        self.measures.append(measure)
        if segment.round >= 0 and not any(s.round == segment.round for s in self.queue):
            self._race()
        if self.guess is None and segment.round < 0 and not self.queue and self.forced is None:
            self.guess = self._guess(measure)
            cands = candidates(self.guess.workers, self.max_workers, self.accelerator, self.fixed)
            self._plan_rounds(cands)

    def _race(self) -> None:
        """Stop probing settings slower than the fastest by RACE in every round so far: far
        beyond noise, they cannot be chosen, and each of their steps slows training."""
        times = self.compared()
        if len(times) < 2:
            return
        best = {r: min(t[r] for t in times.values() if r in t) for t in times.values() for r in t}
        for setting, t in times.items():
            worst = min(v / best[r] for r, v in t.items())
            if worst > RACE and setting not in self.raced:
                self.raced[setting] = f"{worst:.1f}x slower than the fastest in every round"

    def fail(self, segment: Segment, measure: Measure, steps_left: int) -> None:
        """Drop a probe that crashed, hung or ran out of memory; finish its steps on the last
        setting that worked."""
        self.measures.append(measure)
        self.dropped[segment.setting] = measure.failed
        if steps_left > 0:
            self.queue.insert(0, Segment(self.last_good(), steps_left))

    def last_good(self) -> Setting:
        """The setting of the latest segment that did not fail (the default before any)."""
        good = [m.setting for m in self.measures if not m.failed]
        return good[-1] if good else Setting().fixed(self.fixed)

    def _guess(self, m: Measure) -> Guess:
        load = m.counted_wait_s / m.counted if m.counted else m.wait_s / max(m.steps, 1)
        step = m.step_s / max(m.steps, 1)
        load_cpu = min(m.wait_cpu_s / m.wait_s, 1.0) if m.wait_s > 0 else 0.0
        step_cpu = m.step_cpu_s / m.step_s if m.step_s > 0 else 0.0
        return guess_workers(
            load * 1000, step * 1000, load_cpu, step_cpu, self.cpus, self.max_workers
        )

    def _plan_rounds(self, cands: list[Setting]) -> None:
        """Interleaved rounds over as many candidates as the budget gives MIN_SEGMENT steps."""
        spent = sum(m.steps for m in self.measures)
        left = self.budget - spent
        k = max(1, min(len(cands), MAX_CANDIDATES, left // (ROUNDS * MIN_SEGMENT)))
        cands = cands[:k]
        if len(cands) < 2:
            return
        steps = left // (ROUNDS * len(cands))
        for r in range(ROUNDS):
            turn = r % len(cands)
            order = cands[turn:] + cands[:turn]
            self.queue += [Segment(s, steps, r) for s in order]

    def compared(self) -> dict[Setting, dict[int, float]]:
        """Each compared setting's time per batch by round (dropped settings left out)."""
        times: dict[Setting, dict[int, float]] = {}
        for m in self.measures:
            if m.round >= 0 and not m.failed and m.setting not in self.dropped:
                times.setdefault(m.setting, {})[m.round] = m.per_batch_s
        return times

    def state(self) -> dict[str, Any]:
        """Plain data for a checkpoint."""
        return {
            "measures": [{**asdict(m), "setting": asdict(m.setting)} for m in self.measures],
            "queue": [{**asdict(s), "setting": asdict(s.setting)} for s in self.queue],
            "dropped": [[asdict(s), why] for s, why in self.dropped.items()],
            "raced": [[asdict(s), why] for s, why in self.raced.items()],
            "guess": asdict(self.guess) if self.guess else None,
            "started": self.started,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """The inverse of :meth:`state`."""
        self.measures = [
            Measure(**{**m, "setting": Setting(**m["setting"])}) for m in state["measures"]
        ]
        self.queue = [Segment(**{**s, "setting": Setting(**s["setting"])}) for s in state["queue"]]
        self.dropped = {Setting(**s): why for s, why in state["dropped"]}
        self.raced = {Setting(**s): why for s, why in state["raced"]}
        self.guess = Guess(**state["guess"]) if state["guess"] else None
        self.started = state["started"]


def median_or(values: list[float], default: float = 0.0) -> float:
    """Median of ``values``, or ``default`` when empty."""
    return statistics.median(values) if values else default
