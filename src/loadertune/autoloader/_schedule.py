"""The probe schedule: the model-based guess, the candidates around it, and interleaved rounds.

A pure state machine fed with measurements (:class:`Measure`), so it is tested with
synthetic figures. The first segment loads in the training process (``num_workers=0``): its
waits are the load time of a batch and the gaps between them the step, which give the
guess (:func:`loadertune.decision.guess`, the sweep's too). The candidates around the guess
are then measured in rounds, each round in a rotated order (A B C, B C A, C A B) so drift
and the previous setting's shutdown hit them alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from loadertune import decision
from loadertune.config import in_flight
from loadertune.decision import Bound, Guess

GUESS_STEPS = 4  # steps that load in the training process to measure load and step time
ROUNDS = 3  # rounds the budget is split for: the fewest a median interval needs; settings
# still probed after them get more rounds while the budget lasts
MIN_SEGMENT = 8  # fewest steps a probe segment is worth its worker start-up
MAX_CANDIDATES = 5
FAR_BEHIND = 1.5  # slower than a round's fastest by this factor in every round: no more rounds.
# Not the verdict's "left the race" (loadertune.decision.out_of_race: 2% behind the fastest in
# every paired round, two or more): AutoLoader pays each probe step in training time, and
# leaves a setting only when it is far behind, after as little as one round.
WIDEN = 2  # at most this many doublings beyond the most workers first planned
BENCH = 3.0  # the default, measured first, predicted this much slower than the guess: not
# probed again unless the first round's fastest fails to beat it by FAR_BEHIND


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


def guess_workers(
    load_ms: float, step_ms: float, load_cpu: float, step_cpu: float, cpus: int, cap: int
) -> Guess:
    """The model guess (:func:`loadertune.decision.guess`) for one batch's load and step time
    and the cores each kept busy, at most ``cap`` workers. No memory bound: a probe that runs
    out of memory is dropped. Per batch (batch size 1), so its time per sample is per batch.
    """
    return decision.guess(
        load_ms_per_batch=load_ms,
        step_ms=step_ms,
        cpu_share_of_loading=load_cpu,
        usable_cpus=cpus,
        max_workers=cap,
        step_cpu_cores=step_cpu,
        capped_by=Bound.MAX_WORKERS,
    )


def segment_length(s: Setting) -> int:
    """Steps a segment needs to show a setting's steady pace: its workers' first burst, its
    look-ahead drained at the end, and MIN_SEGMENT / 2 steady steps between."""
    return max(
        MIN_SEGMENT, in_flight(s.num_workers, s.prefetch_factor) + s.num_workers + MIN_SEGMENT // 2
    )


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
    # Time the workers (without workers, this process) spent queued for a CPU from the
    # first steady cycle on, summed (loadertune.machine._run_queue); None where not read.
    queued_s: float | None = None
    failed: str = ""  # why the probe was dropped

    def add_cycle(
        self, wait: float, wait_cpu: float, step: float, step_cpu: float, steady: bool
    ) -> None:
        """Add one delivered cycle; a ``steady`` one (every worker still had a batch in
        flight) also counts for the setting's pace."""
        self.steps += 1
        self.wait_s, self.step_s = self.wait_s + wait, self.step_s + step
        self.wait_cpu_s, self.step_cpu_s = self.wait_cpu_s + wait_cpu, self.step_cpu_s + step_cpu
        if steady:
            self.counted += 1
            self.counted_s += wait + step
            self.counted_wait_s += wait

    @property
    def per_batch_s(self) -> float:
        """Steady time per batch: the training loop's cycle, look-ahead bursts left out."""
        if self.counted:
            return self.counted_s / self.counted
        return (self.wait_s + self.step_s) / max(self.steps, 1)

    @property
    def wait_share(self) -> float:
        """Share of the segment's time spent waiting for batches."""
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
    far_behind: dict[Setting, str] = field(default_factory=dict)  # no more rounds: why
    guess: Guess | None = None
    started: bool = False
    cands: list[Setting] = field(default_factory=list)  # compared in rounds
    benched: dict[Setting, float] = field(default_factory=dict)  # left out by the guess: s/batch
    extra_steps: int = 0  # added to every segment's length when the budget allows
    next_round: int = 0
    widened: int = 0  # candidates added beyond the most workers first planned
    to_come: int = 0  # steps of a booked segment still in flight (its tail, not saved)

    def next(self) -> Segment | None:
        """The next segment to run, or None when tuning is over."""
        if not self.started:
            self.started = True
            first = Setting().fixed(self.fixed)
            if self.forced is None and not first.num_workers:
                return Segment(first, min(GUESS_STEPS, self.budget))
            fixed = candidates(0, self.max_workers, self.accelerator, self.fixed)
            self._plan(self.forced or fixed)
        out = (set(self.dropped) | set(self.far_behind)).__contains__
        self.queue = [s for s in self.queue if s.round < 0 or not out(s.setting)]
        if not self.queue:
            self._next_round()
        return self.queue.pop(0) if self.queue else None

    def done(self, segment: Segment, measure: Measure) -> None:
        """Record a finished segment; after the guess segment, plan the rounds."""
        self.measures.append(measure)
        if segment.round >= 0 and not any(s.round == segment.round for s in self.queue):
            self._leave_far_behind()
        if self.guess is None and segment.round < 0 and not self.cands and self.forced is None:
            self.guess = self._guess(measure)
            cands = candidates(self.guess.workers, self.max_workers, self.accelerator, self.fixed)
            self._plan(self._bench_default(cands, measure))

    def _bench_default(self, cands: list[Setting], first: Measure) -> list[Setting]:
        """Leave out the default when the first steps, which ran it, make it far slower than
        the guess predicts; the first round of the others confirms or recalls it."""
        default = first.setting
        predicted = self.guess.time_per_sample_ms if self.guess else 0.0  # per batch
        if default not in cands or predicted <= 0:
            return cands
        slower = first.per_batch_s * 1000 / predicted
        if slower < BENCH:
            return cands
        self.benched = {default: first.per_batch_s}
        self.far_behind[default] = f"measured first, predicted {slower:.0f}x slower than the guess"
        return [c for c in cands if c != default]

    def _leave_far_behind(self) -> None:
        """Stop probing settings slower than the fastest by FAR_BEHIND in every round so far:
        far beyond noise, they cannot be chosen, and each of their steps slows training."""
        times = self.compared()
        if len(times) < 2:
            return
        best = {r: min(t[r] for t in times.values() if r in t) for t in times.values() for r in t}
        for setting, t in times.items():
            worst = min(v / best[r] for r, v in t.items())
            if worst > FAR_BEHIND and setting not in self.far_behind:
                self.far_behind[setting] = f"{worst:.1f}x slower than the fastest in every round"
        self._widen(times)
        for setting, first in list(self.benched.items()):
            if min(best.values()) * FAR_BEHIND > first:  # the prediction was wrong: probe it
                del self.far_behind[setting], self.benched[setting]
                self.cands.append(setting)

    def _widen(self, times: dict[Setting, dict[int, float]]) -> None:
        """When the most workers probed won the latest round, probe twice as many too (up to
        WIDEN times): the guess can underestimate, e.g. when other work shares the CPUs."""
        last = max(r for t in times.values() for r in t)
        in_round = {s: t[last] for s, t in times.items() if last in t}
        winner = min(in_round, key=lambda s: in_round[s])
        most = max(c.num_workers for c in self.cands)
        if self.forced is not None or "num_workers" in self.fixed:
            return  # the user named the settings to compare
        if winner.num_workers < most or most >= self.max_workers or self.widened >= WIDEN:
            return
        wider = replace(winner, num_workers=min(2 * most, self.max_workers)).fixed(self.fixed)
        if wider not in self.cands and wider not in self.dropped and self._round_fits(wider):
            self.cands.append(wider)
            self.widened += 1

    def _round_fits(self, joining: Setting) -> bool:
        """Whether the budget left holds a round of the settings still probed with
        ``joining`` among them: one that did not would end the rounds, leaving a decision
        on the rounds so far, where the settings already probed could have had another."""
        alive = [c for c in self.cands if c not in self.dropped and c not in self.far_behind]
        need = sum(segment_length(c) + self.extra_steps for c in [*alive, joining])
        return self.budget - self.spent >= need

    def fail(self, segment: Segment, measure: Measure, steps_left: int) -> None:
        """Drop a probe that crashed, hung or ran out of memory; finish its steps on the last
        setting that worked."""
        self.measures.append(measure)
        self.dropped[segment.setting] = measure.failed
        if steps_left > 0:
            self.queue.insert(0, Segment(self.last_good(), steps_left))

    def last_good(self) -> Setting:
        """The setting of the latest segment that did not fail, of a setting never dropped
        (the default before any): a setting that worked, then failed, is not run again."""
        good = [m.setting for m in self.measures if not m.failed and m.setting not in self.dropped]
        return good[-1] if good else Setting().fixed(self.fixed)

    def _guess(self, m: Measure) -> Guess:
        """The model guess from the first segment, which loaded in the training process."""
        load = m.counted_wait_s / m.counted if m.counted else m.wait_s / max(m.steps, 1)
        step = m.step_s / max(m.steps, 1)
        load_cpu = min(m.wait_cpu_s / m.wait_s, 1.0) if m.wait_s > 0 else 0.0
        step_cpu = m.step_cpu_s / m.step_s if m.step_s > 0 else 0.0
        return guess_workers(
            load * 1000, step * 1000, load_cpu, step_cpu, self.cpus, self.max_workers
        )

    @property
    def spent(self) -> int:
        """Training steps the tuning has used so far, a booked segment's tail included."""
        return sum(m.steps for m in self.measures) + self.to_come

    def _plan(self, cands: list[Setting]) -> None:
        """Keep the most telling candidates the budget gives ROUNDS rounds of segments long
        enough to show each one's steady pace; spread what is left over their segments."""
        left = self.budget - self.spent
        k = min(len(cands), MAX_CANDIDATES)
        while k > 2 and ROUNDS * sum(segment_length(c) for c in cands[:k]) > left:
            k -= 1
        self.cands = cands[:k]
        used = ROUNDS * sum(segment_length(c) for c in self.cands)
        self.extra_steps = max(0, (left - used) // (ROUNDS * max(k, 1)))

    def _next_round(self) -> None:
        """Queue one more round over the settings still probed, in a rotated order so
        drift and the previous setting hit each alike, while the budget has room for it."""
        alive = [c for c in self.cands if c not in self.dropped and c not in self.far_behind]
        steps = {c: segment_length(c) + self.extra_steps for c in alive}
        if len(alive) < 2 or self.budget - self.spent < sum(steps.values()):
            return
        turn = self.next_round % len(alive)
        order = alive[turn:] + alive[:turn]
        self.queue += [Segment(c, steps[c], self.next_round) for c in order]
        self.next_round += 1

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
            "far_behind": [[asdict(s), why] for s, why in self.far_behind.items()],
            "guess": self._guess_state(),
            "started": self.started,
            "cands": [asdict(c) for c in self.cands],
            "benched": [[asdict(c), t] for c, t in self.benched.items()],
            "extra_steps": self.extra_steps,
            "next_round": self.next_round,
            "widened": self.widened,
        }

    def _guess_state(self) -> dict[str, Any] | None:
        """The guess in a checkpoint: the figures it came from, what it gave, the CPUs."""
        g = self.guess
        if g is None:
            return None
        return {
            "workers": g.workers,
            "load_ms": g.load_ms_per_batch,
            "step_ms": g.step_ms,
            "load_cpu": g.cpu_share_of_loading,
            "step_cpu": g.step_cpu_cores,
            "bound": g.bound.value,
            "cpus": self.cpus,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """The inverse of :meth:`state`."""
        self.measures = [
            Measure(**{**m, "setting": Setting(**m["setting"])}) for m in state["measures"]
        ]
        self.queue = [Segment(**{**s, "setting": Setting(**s["setting"])}) for s in state["queue"]]
        self.dropped = {Setting(**s): why for s, why in state["dropped"]}
        left = state.get("far_behind", state.get("raced", []))  # "raced": an older checkpoint
        self.far_behind = {Setting(**s): why for s, why in left}
        g = state["guess"]
        self.guess = None
        if g:  # the figures it came from give it again
            args = (g["load_ms"], g["step_ms"], g["load_cpu"], g["step_cpu"], g["cpus"])
            self.guess = guess_workers(*args, self.max_workers)
        self.started = state["started"]
        self.cands = [Setting(**c) for c in state["cands"]]
        self.benched = {Setting(**c): t for c, t in state["benched"]}
        self.extra_steps, self.next_round = state["extra_steps"], state["next_round"]
        self.widened = state["widened"]
