"""Statistical tests of the paper, vectorised with numpy (seeded, reproducible)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from engine.analysis.metrics import Comparison, group_by


def rankdata(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    """``scipy.stats.rankdata`` (average ranks), imported on first use: scipy.stats costs
    ~0.6 s to import, which the TUI would otherwise pay before its first frame."""
    from scipy.stats import rankdata as scipy_rankdata

    return np.asarray(scipy_rankdata(values, axis=axis))

SPEED_FLOOR = 0.05
CHUNK = 2000


def _rowwise_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of ``x`` with the same row of ``y`` (ties averaged)."""
    rx = rankdata(x, axis=-1)
    ry = rankdata(y, axis=-1)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    num = (rx * ry).sum(axis=-1)
    den = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


class _SignFlipRanker:
    """Average ranks of ``s · x`` for many sign vectors ``s`` without sorting each draw.

    Sorting ``|x|`` once gives magnitude classes (ties share a class); in a draw, a positive
    value ranks above every negative and zero and above the positives of smaller classes, a
    negative ranks above the negatives of larger classes. Cumulative counts over the
    magnitude order give every rank in O(draws × n).
    """

    def __init__(self, x: np.ndarray) -> None:
        self.order = np.argsort(np.abs(x), kind="stable")
        mags = np.abs(x)[self.order]
        self.zero = mags == 0
        self.n_zero = int(self.zero.sum())
        boundaries = np.flatnonzero(np.diff(mags)) + 1
        starts = np.concatenate([[0], boundaries])
        ends = np.concatenate([boundaries, [mags.size]])
        cls = np.repeat(np.arange(starts.size), ends - starts)
        self.start = starts[cls]
        self.end = ends[cls]
        self.sorted_values = x[self.order]

    def ranks(self, flips: np.ndarray) -> np.ndarray:
        """Ranks (1-based, ties averaged) of one draw per row, in the magnitude order.

        ``flips[d, i]`` says whether draw ``d`` flips the sign of the i-th value *in the
        magnitude order* (flips are independent, so drawing them in that order is the same).
        """
        nonzero = ~self.zero
        pos = (flips == (self.sorted_values < 0)) & nonzero
        neg = nonzero & ~pos
        k, n = pos.shape
        cp = np.zeros((k, n + 1), dtype=np.int32)
        cn = np.zeros((k, n + 1), dtype=np.int32)
        np.cumsum(pos, axis=1, out=cp[:, 1:])
        np.cumsum(neg, axis=1, out=cn[:, 1:])
        n_neg = cn[:, -1:]
        pos_less = cp[:, self.start]
        cp_end = cp[:, self.end]
        cn_end = cn[:, self.end]
        rank_pos = n_neg + self.n_zero + (pos_less + cp_end + 1) / 2
        rank_neg = (n_neg - cn_end) + (cn_end - cn[:, self.start] + 1) / 2
        out = np.where(pos, rank_pos, rank_neg)
        if self.n_zero:
            out[:, self.zero] = n_neg + (self.n_zero + 1) / 2
        return out


def _pearson_rows(rx: np.ndarray, ry: np.ndarray) -> np.ndarray:
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    num = (rx * ry).sum(axis=-1)
    den = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    if len(x) < 3:
        return None
    value = float(_rowwise_spearman(np.asarray(x, float)[None], np.asarray(y, float)[None])[0])
    return None if math.isnan(value) else value


def direction_pairs(comps: Sequence[Comparison]) -> list[tuple[Comparison, Comparison]]:
    """(cute→tirx, tirx→cute) comparison pairs on the same model, problem and replicate."""
    index = {(c.model, c.problem, c.replicate, c.direction): c for c in comps}
    pairs = []
    for (model, problem, rep, direction), c in sorted(index.items()):
        if direction == "cute->tirx":
            other = index.get((model, problem, rep, "tirx->cute"))
            if other is not None:
                pairs.append((c, other))
    return pairs


def sign_flip_test(
    a: Sequence[float], b: Sequence[float], draws: int = 20_000, seed: int = 0
) -> dict[str, float | int | None]:
    """Spearman of ``a`` and ``b`` against independent random sign flips of each value.

    The reference distribution keeps magnitudes and zeros and flips each value's sign with
    probability ½; ``p_negative`` is the share of draws at least as negative as observed.
    """
    observed = spearman(a, b)
    if observed is None:
        return {"n": len(a), "spearman": None, "p_negative": None, "p_two_sided": None,
                "draws": draws}
    x = np.asarray(a, float)
    y = np.asarray(b, float)
    rank_x, rank_y = _SignFlipRanker(x), _SignFlipRanker(y)
    # y's ranks come back in y's magnitude order; this index puts them in x's order
    to_x_order = np.argsort(rank_y.order)[rank_x.order]
    rng = np.random.default_rng(seed)
    le = ge = 0
    for start in range(0, draws, CHUNK):
        k = min(CHUNK, draws - start)
        fx = rng.random((k, x.size)) < 0.5
        fy = rng.random((k, y.size)) < 0.5
        r = _pearson_rows(rank_x.ranks(fx), rank_y.ranks(fy)[:, to_x_order])
        r = r[~np.isnan(r)]
        le += int((r <= observed + 1e-12).sum())
        ge += int((np.abs(r) >= abs(observed) - 1e-12).sum())
    return {"n": int(x.size), "spearman": observed, "draws": draws,
            "p_negative": (le + 1) / (draws + 1), "p_two_sided": (ge + 1) / (draws + 1)}


def direction_correlations(
    comps: Sequence[Comparison], draws: int = 20_000, seed: int = 0
) -> list[dict[str, object]]:
    """Spearman of the two directions' log ρ: pooled (with the sign-flip test), per model,
    per family, and pooled over pairs whose four attempts all pass."""
    pairs = direction_pairs(comps)
    out: list[dict[str, object]] = []

    def row(scope: str, name: str, ps: Sequence[tuple[Comparison, Comparison]],
            test: bool) -> None:
        a = [p[0].log_rho for p in ps]
        b = [p[1].log_rho for p in ps]
        if test:
            result = sign_flip_test(a, b, draws, seed)
        else:
            result = {"n": len(ps), "spearman": spearman(a, b)}
        out.append({"scope": scope, "name": name, **result})

    row("pooled", "all", pairs, True)
    all_pass = [p for p in pairs if p[0].source.passed and p[0].baseline.passed
                and p[0].treatment is not None and p[0].treatment.passed
                and p[1].treatment is not None and p[1].treatment.passed]
    row("pooled", "all four attempts pass", all_pass, False)
    for key, _ in group_by([p[0] for p in pairs], lambda c: (c.model,)).items():
        row("model", str(key[0]), [p for p in pairs if p[0].model == key[0]], False)
    for key, _ in group_by([p[0] for p in pairs], lambda c: (c.family,)).items():
        row("family", str(key[0]), [p for p in pairs if p[0].family == key[0]], False)
    return out


def _floored(speed: float | None) -> float:
    return max(speed if speed is not None else 0.0, SPEED_FLOOR)


def source_speed_test(
    comps: Sequence[Comparison], draws: int = 2_000, seed: int = 0
) -> dict[str, float | int | None]:
    """Do skill-conditioned attempts track the source's speed more than solo attempts do?

    Over comparisons with a transferred skill, speedups floored at 0.05× (non-passing
    attempts get the floor): Spearman(source, solo) vs Spearman(source, treatment). The
    reference distribution swaps solo and treatment within each comparison with p = ½.
    """
    used = [c for c in comps if c.treatment is not None]
    if len(used) < 3:
        return {"n": len(used), "rho_solo": None, "rho_skill": None, "gap": None,
                "p_value": None, "draws": draws}
    src = np.array([_floored(c.source.speedup) for c in used])
    solo = np.array([_floored(c.baseline.speedup) for c in used])
    skill = np.array([_floored(c.treatment.speedup) for c in used])  # type: ignore[union-attr]
    r_solo = spearman(src, solo)
    r_skill = spearman(src, skill)
    if r_solo is None or r_skill is None:
        return {"n": len(used), "rho_solo": r_solo, "rho_skill": r_skill, "gap": None,
                "p_value": None, "draws": draws}
    gap = r_skill - r_solo
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, draws, CHUNK):
        k = min(CHUNK, draws - start)
        swap = rng.random((k, src.size)) < 0.5
        a = np.where(swap, skill, solo)
        b = np.where(swap, solo, skill)
        s = np.broadcast_to(src, a.shape)
        g = _rowwise_spearman(s, b) - _rowwise_spearman(s, a)
        hits += int((g[~np.isnan(g)] >= gap).sum())
    return {"n": len(used), "rho_solo": r_solo, "rho_skill": r_skill, "gap": gap,
            "p_value": (hits + 1) / (draws + 1), "draws": draws}


def bootstrap_delta_gm(
    comps: Sequence[Comparison], draws: int = 2_000, seed: int = 0, level: float = 0.95
) -> dict[str, float | int | None]:
    """Percentile bootstrap confidence interval on ΔGM (resampling comparisons)."""
    logs = np.array([c.log_rho for c in comps])
    if logs.size == 0:
        return {"n": 0, "delta_gm": None, "low": None, "high": None}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, logs.size, size=(draws, logs.size))
    means = logs[idx].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return {"n": int(logs.size), "delta_gm": float(np.exp(logs.mean()) - 1),
            "low": float(np.exp(low) - 1), "high": float(np.exp(high) - 1), "level": level}


def bootstrap_table(
    comps: Sequence[Comparison], draws: int = 2_000, seed: int = 0
) -> list[dict[str, object]]:
    return [
        {"model": key[0], "direction": key[1], **bootstrap_delta_gm(group, draws, seed)}
        for key, group in group_by(comps, lambda c: (c.model, c.direction)).items()
    ]


def delta_gm_interval(
    comps: Sequence[Comparison], draws: int = 2_000, seed: int = 0
) -> dict[str, object]:
    """The bootstrap interval on one cell's ΔGM as lift-table columns."""
    b = bootstrap_delta_gm(comps, draws, seed)
    return {"ci_low": b["low"], "ci_high": b["high"], "ci_level": b.get("level")}


def rho_interval(
    comps: Sequence[Comparison],
    draws: int = 2_000,
    seed: int = 0,
    level: float = 0.95,
    min_n: int = 2,
) -> dict[str, float | int | bool | None]:
    """ρ̄ (the geometric mean of ρ) over paired comparisons, with a percentile bootstrap
    interval over the pairs (:func:`bootstrap_delta_gm`) and what stands behind it.

    ``n`` counts the pairs (a baseline and a treatment of one replicate), ``replicates`` the
    distinct replicate numbers; below ``min_n`` pairs there is no interval (None).
    ``preview``: some pair was graded in CPU preview, so the figure is not comparable.
    """
    boot = bootstrap_delta_gm(comps, draws, seed, level)
    n = len(comps)

    def ratio(value: float | int | None) -> float | None:
        return None if value is None else 1.0 + float(value)

    enough = n >= min_n
    return {
        "n": n,
        "replicates": len({c.replicate for c in comps}),
        "gm": ratio(boot["delta_gm"]),
        "low": ratio(boot["low"]) if enough else None,
        "high": ratio(boot["high"]) if enough else None,
        "level": level,
        "preview": any(
            c.baseline.preview or (c.treatment is not None and c.treatment.preview)
            for c in comps
        ),
    }
