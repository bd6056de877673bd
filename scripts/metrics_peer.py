#!/usr/bin/env python3
"""ISS and KTS as a careful researcher would write them with NumPy, SciPy and
scikit-learn: the peer that `npm run bench:metrics` times hsm against, and the
second implementation tests hold hsm's numbers to. Same definitions
(docs/metrics.md), written for speed:

- each layer is read once (float16 .npy through mmap) and widened once to float32;
- ISS: centring and normalizing vectorized; ranks by one float32 GEMM per block
  of query rows against every anchor of the layer, own scores picked with
  take_along_axis, counts by one comparison per block; fact-macro means with
  bincount; bootstrap replicates drawn as one index matrix;
- KTS: scikit-learn's LogisticRegression (L-BFGS) per fold, its gradient
  tolerance set to metrics.md's stopping rule, the rule then checked on the
  spec's own objective (a fit that stopped early is resumed; one that misses
  the rule after 2,000 iterations is counted in probes_not_converged); AUROC
  from one sort of each family's negatives (ties counted one half), bootstrap
  replicates as fact-count weights over that sort, 128 replicates at a time.

Bootstrap draws come from NumPy's PCG64 seeded with (seed, fnv1a32 of
"metric/layer/family"), so intervals agree with hsm's within metrics.md's
interval tolerance, not bit for bit. The output JSON carries the BLAS library
and its thread count (threadpoolctl) and the seconds spent in each phase.

Usage: metrics_peer.py STORE [--scored SCORED] [--metrics iss,kts] [--bootstrap B]
       [--seed S] [--probe-c C] [--folds K] [--abstain-as-incorrect]
       [--allow-missing-labels] [--out FILE]
"""
import argparse
import json
import sys
import time
import warnings

import numpy as np

ANCHOR = "anchor"
BLOCK_ROWS = 2048  # query rows per similarity block: 2,048 × F float32 stays well inside memory
REPLICATE_BLOCK = 128  # bootstrap replicates weighed at once for AUROC


def fnv1a32(text):
    h = 0x811C9DC5
    for b in text.encode("utf-8"):
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def generator(seed, metric, layer, family):
    return np.random.default_rng([seed & 0xFFFFFFFF, fnv1a32("%s/%d/%s" % (metric, layer, family))])


def draw_counts(rng, n, b):
    """b multisets of n items drawn with replacement, as a b × n matrix of counts."""
    idx = rng.integers(0, n, size=(b, n))
    idx += (np.arange(b) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)


def interval(reps):
    reps = reps[np.isfinite(reps)]
    if len(reps) == 0:
        return None, None
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return float(lo), float(hi)


def blas_info():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"note": "threadpoolctl not installed (apt-get install python3-threadpoolctl)"}]
    keys = ("internal_api", "version", "architecture", "threading_layer", "num_threads", "filepath")
    return [{k: p.get(k) for k in keys} for p in threadpool_info() if p.get("user_api") == "blas"]


class Sorted:
    """A group's rows arranged once for AUROC and its fact-weighted bootstrap replicates.

    The negatives are sorted by score; each positive knows how many negatives
    score strictly below it and how many tie with it (counted one half), so a
    replicate's AUROC is a running sum over the negatives' weights, read at
    each positive: wins = Σ_pos w_i · (Σ_{neg below} w_j + ½ Σ_{neg tied} w_j).
    """

    def __init__(self, scores, labels, fact):
        pos = labels == 1
        order = np.argsort(scores[~pos], kind="stable")
        s_neg = scores[~pos][order]
        self.neg_fact = fact[~pos][order]
        self.pos_fact = fact[pos]
        s_pos = scores[pos]
        self.below = np.searchsorted(s_neg, s_pos, side="left")
        upto = np.searchsorted(s_neg, s_pos, side="right")
        # Positives tied with negatives: a small (tied positives × facts) matrix of the tied negatives' facts.
        self.tied = np.flatnonzero(upto > self.below)
        self.tie_facts = np.zeros((len(self.tied), fact.max() + 1 if len(fact) else 0), dtype=np.float32)
        for r, i in enumerate(self.tied):
            np.add.at(self.tie_facts[r], self.neg_fact[self.below[i]:upto[i]], 1)

    def auroc(self, w):
        """AUROC under each row of w (replicates × facts); NaN where a class has no weight."""
        neg_cum = np.zeros((len(w), len(self.neg_fact) + 1), dtype=w.dtype)
        np.cumsum(np.take(w, self.neg_fact, axis=1), axis=1, out=neg_cum[:, 1:])
        w_pos = np.take(w, self.pos_fact, axis=1)
        wins = np.einsum("ij,ij->i", w_pos, np.take(neg_cum, self.below, axis=1), dtype=np.float64)
        if len(self.tied):
            wins += 0.5 * np.einsum("ij,ij->i", w_pos[:, self.tied], w @ self.tie_facts.T, dtype=np.float64)
        tp, tn = w_pos.sum(axis=1, dtype=np.float64), neg_cum[:, -1].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((tp > 0) & (tn > 0), wins / (tp * tn), np.nan)

    def point(self):
        a = self.auroc(np.ones((1, self.tie_facts.shape[1]), dtype=np.float64))[0]
        return None if np.isnan(a) else float(a)

    def replicates(self, counts):
        """AUROC under each replicate's fact counts (replicates × facts).

        Counts are small integers: float32 holds them and their running sums
        exactly (below 2^24); the products are summed in float64.
        """
        counts = counts.astype(np.float32)
        out = np.empty(len(counts))
        for b in range(0, len(counts), REPLICATE_BLOCK):
            out[b:b + REPLICATE_BLOCK] = self.auroc(counts[b:b + REPLICATE_BLOCK])
        return out


def spec_gradient_ok(Z, s, w, b, C, n):
    """metrics.md's stopping rule on ½‖w‖² + C·Σ log(1 + exp(−s(w·z + b))): max |gradient| ≤ 1e-5·C·n."""
    m = s * (Z @ w + b)
    g = -C * s * np.exp(-np.logaddexp(0.0, m))  # C·∂/∂t log(1 + e^(−s t))
    return max(np.abs(w + Z.T @ g).max(), abs(g.sum())) <= 1e-5 * C * n


def kts_layer(layer, H, finite, labels, fold, facts_code, fams, names, a, timing):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    usable = finite & (labels >= 0)
    anc = usable & (fams == ANCHOR)
    score = np.zeros(len(H))
    null_reason = None
    not_converged = 0
    t = time.perf_counter()
    for k in range(a.folds):
        tr = np.flatnonzero(anc & (fold != k))
        y = labels[tr]
        if len(tr) == 0 or y.min() == y.max():
            only = "no labelled anchor rows" if len(tr) == 0 else 'only "%s" anchors' % ("correct" if y[0] == 1 else "incorrect")
            null_reason = "the probe cannot be trained: training fold %d has %s" % (k, only)
            break
        X = H[tr].astype(np.float64)
        mu, sd = X.mean(0), X.std(0)
        sd[sd < 1e-8] = 1
        X -= mu
        X /= sd
        # lbfgs minimizes Σ loss + ‖w‖²/(2C), the spec's objective over C: gtol = 1e-5·n is metrics.md's
        # rule max |gradient| ≤ 1e-5·C·n. SciPy's L-BFGS-B may stop earlier on its relative-decrease
        # test, so the rule is checked on the spec's own gradient and the fit resumed from where it stopped.
        clf = LogisticRegression(C=a.probe_c, tol=1e-5 * len(tr), max_iter=2000, warm_start=True)
        s = 2.0 * y - 1
        iterations = 0
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf.fit(X, y)
            iterations += int(clf.n_iter_[0])
            if spec_gradient_ok(X, s, clf.coef_[0], clf.intercept_[0], a.probe_c, len(tr)):
                break
            if iterations >= 2000 or clf.n_iter_[0] == 0:
                not_converged += 1
                break
        te = np.flatnonzero(usable & (fold == k))
        score[te] = clf.decision_function((H[te].astype(np.float64) - mu) / sd)
    timing["kts_probes"] += time.perf_counter() - t
    t = time.perf_counter()
    rows = []
    groups = [ANCHOR] + names + ["all"]
    sel_of = {fam: np.flatnonzero(usable & ((fams != ANCHOR) if fam == "all" else (fams == fam))) for fam in groups}
    anchor_sorted = None
    anchor_auc = None
    if null_reason is None:
        ga = sel_of[ANCHOR]
        anc_facts, anc_inv = np.unique(facts_code[ga], return_inverse=True)
        anchor_sorted = Sorted(score[ga], labels[ga], anc_inv)
        anchor_auc = anchor_sorted.point()
    for fam in groups:
        sel = sel_of[fam]
        row = {
            "layer": layer, "family": fam, "n_queries": int(len(sel)), "n_facts": int(len(np.unique(facts_code[sel]))),
            "n_correct": int(labels[sel].sum()), "accuracy": float(labels[sel].mean()) if len(sel) else None,
            "auroc": None, "auroc_ci_low": None, "auroc_ci_high": None, "kts": None, "kts_ci_low": None, "kts_ci_high": None,
            "kts_null_reason": null_reason, "probes_not_converged": not_converged, "excluded_nonfinite": int((~finite).sum()),
        }
        rows.append(row)
        if null_reason is not None:
            continue
        if len(sel) == 0:
            row["kts_null_reason"] = "no labelled rows"
            continue
        uniq, inv = np.unique(facts_code[sel], return_inverse=True)
        g = anchor_sorted if fam == ANCHOR else Sorted(score[sel], labels[sel], inv)
        row["auroc"] = g.point()
        counts = draw_counts(generator(a.seed, "kts", layer, fam), len(uniq), a.bootstrap)
        auc_reps = g.replicates(counts)
        row["auroc_ci_low"], row["auroc_ci_high"] = interval(auc_reps)
        if fam == ANCHOR:
            row["kts_null_reason"] = "anchor is the reference family"
        elif row["auroc"] is None:
            row["kts_null_reason"] = "auroc undefined: only one label class among this family's rows"
        elif anchor_auc is None:
            row["kts_null_reason"] = "anchor auroc undefined: only one label class among the anchors"
        elif anchor_auc <= 0.55:
            row["kts_null_reason"] = "auroc_anchor %.4f <= 0.55: the probe learned nothing to transfer" % anchor_auc
        else:
            row["kts"] = (row["auroc"] - 0.5) / (anchor_auc - 0.5)
            # Paired: the same drawn facts weigh the anchor rows of those facts.
            pos = np.searchsorted(anc_facts, uniq)
            has = (pos < len(anc_facts)) & (anc_facts[np.minimum(pos, len(anc_facts) - 1)] == uniq)
            anc_counts = np.zeros((a.bootstrap, len(anc_facts)), dtype=counts.dtype)
            anc_counts[:, pos[has]] = counts[:, has]
            anc_reps = anchor_sorted.replicates(anc_counts)
            with np.errstate(invalid="ignore", divide="ignore"):
                kts_reps = np.where(anc_reps > 0.55, (auc_reps - 0.5) / (anc_reps - 0.5), np.nan)
            row["kts_ci_low"], row["kts_ci_high"] = interval(kts_reps)
    timing["kts_auroc"] += time.perf_counter() - t
    return rows


def iss_layer(layer, H, finite, facts_code, fams, names, a, timing):
    t = time.perf_counter()
    valid = finite.copy()
    X = H if valid.all() else H[valid]
    rows_of = np.flatnonzero(valid)
    X -= X.mean(0, dtype=np.float64).astype(np.float32)
    nrm = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    if (nrm == 0).any():
        keep = nrm > 0
        X, rows_of, nrm = X[keep], rows_of[keep], nrm[keep]
        valid[:] = False
        valid[rows_of] = True
    X *= (1 / nrm).astype(np.float32)[:, None]
    excluded = int(len(H) - len(rows_of))
    fam_x, fact_x = fams[rows_of], facts_code[rows_of]
    # Anchors: one unit vector per fact; several anchor rows average and renormalize.
    is_anc = fam_x == ANCHOR
    anc_rows = np.flatnonzero(is_anc)
    anc_facts, first, per_fact = np.unique(fact_x[anc_rows], return_index=True, return_counts=True)
    F = len(anc_facts)
    if F < 2:
        sys.exit("layer %d: %d fact(s) have a usable anchor row; ISS needs at least 2" % (layer, F))
    A = X[anc_rows[first]].copy()
    for g in np.flatnonzero(per_fact > 1):
        v = X[anc_rows[fact_x[anc_rows] == anc_facts[g]]].sum(0, dtype=np.float64)
        A[g] = v / np.linalg.norm(v)
    S = A.sum(0, dtype=np.float64)
    # Queries: non-anchor rows of anchored facts.
    cand = np.flatnonzero(~is_anc)
    pos = np.searchsorted(anc_facts, fact_x[cand])
    has = (pos < F) & (anc_facts[np.minimum(pos, F - 1)] == fact_x[cand])
    skipped = int((~has).sum())
    q, own_idx = cand[has], pos[has]
    timing["iss_prepare"] += time.perf_counter() - t
    t = time.perf_counter()
    S32 = S.astype(np.float32)
    own = np.empty(len(q))
    other = np.empty(len(q))
    above = np.empty(len(q), dtype=np.int64)
    for b in range(0, len(q), BLOCK_ROWS):
        blk = slice(b, b + BLOCK_ROWS)
        xb = X[q[blk]]
        sims = xb @ A.T
        o = np.take_along_axis(sims, own_idx[blk, None], axis=1)
        # Strictly greater: the own column never counts itself.
        above[blk] = np.count_nonzero(sims > o, axis=1)
        # own and other for the margin, in float64.
        own[blk] = np.einsum("ij,ij->i", xb, A[own_idx[blk]], dtype=np.float64)
        other[blk] = (xb @ S32 - own[blk]) / (F - 1)
    timing["iss_ranks"] += time.perf_counter() - t
    t = time.perf_counter()
    margin = own - other
    rank = 1 + above
    hit, inv_rank = (rank == 1).astype(np.float64), 1.0 / rank
    out = []
    for fam in names + ["all"]:
        sel = np.arange(len(q)) if fam == "all" else np.flatnonzero(fam_x[q] == fam)
        row = {
            "layer": layer, "family": fam, "n_queries": int(len(sel)), "n_facts": 0, "iss": None, "own_cos": None,
            "other_cos": None, "r_at_1": None, "mrr": None, "iss_ci_low": None, "iss_ci_high": None,
            "excluded_nonfinite": excluded, "skipped_no_anchor": skipped,
        }
        out.append(row)
        if len(sel) == 0:
            continue
        uniq, inv = np.unique(fact_x[q[sel]], return_inverse=True)
        size = np.bincount(inv)

        def fact_means(v):
            return np.bincount(inv, weights=v[sel]) / size

        fm = fact_means(margin)
        counts = draw_counts(generator(a.seed, "iss", layer, fam), len(uniq), a.bootstrap)
        reps = counts @ fm / len(uniq)
        lo, hi = interval(reps)
        row.update({
            "n_facts": int(len(uniq)), "iss": float(fm.mean()), "own_cos": float(fact_means(own).mean()),
            "other_cos": float(fact_means(other).mean()), "r_at_1": float(fact_means(hit).mean()),
            "mrr": float(fact_means(inv_rank).mean()), "iss_ci_low": lo, "iss_ci_high": hi,
        })
    timing["iss_stats"] += time.perf_counter() - t
    return out


def read_labels(a, query_ids):
    lab = {}
    with open(a.scored, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                lab[r["query_id"]] = r["label"]
    value = {"correct": 1, "incorrect": 0, "abstain": 0 if a.abstain_as_incorrect else -1, "ambiguous": -1, "unparseable": -1}
    missing = [q for q in query_ids if q not in lab]
    if missing and not a.allow_missing_labels:
        sys.exit("%d store rows have no scored row (first: %s); pass --allow-missing-labels" % (len(missing), missing[0]))
    return np.array([value[lab[q]] if q in lab else -1 for q in query_ids], dtype=np.int8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--scored")
    ap.add_argument("--metrics", default="iss,kts")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--probe-c", type=float, default=0.01)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--abstain-as-incorrect", action="store_true")
    ap.add_argument("--allow-missing-labels", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.perf_counter()
    timing = dict.fromkeys(["read", "kts_probes", "kts_auroc", "iss_prepare", "iss_ranks", "iss_stats"], 0.0)
    with open(a.store + "/index.json", encoding="utf-8") as f:
        m = json.load(f)
    fams = np.array(m["condition_families"])
    fact_names, facts_code = np.unique(np.array(m["fact_ids"]), return_inverse=True)
    names = sorted(set(m["condition_families"]) - {ANCHOR})
    metrics = a.metrics.split(",")
    labels = fold = None
    if "kts" in metrics:
        if not a.scored:
            sys.exit("KTS needs --scored")
        labels = read_labels(a, m["query_ids"])
        fold = np.array([fnv1a32(f) % a.folds for f in fact_names])[facts_code]
    out = {"iss": [], "kts": []}
    for layer in m["layers"]:
        t = time.perf_counter()
        H = np.load("%s/L%03d.npy" % (a.store, layer), mmap_mode="r").astype(np.float32)
        finite = np.isfinite(H).all(axis=1)
        timing["read"] += time.perf_counter() - t
        # KTS reads the raw values; ISS then centres and normalizes the same matrix in place.
        if labels is not None:
            out["kts"] += kts_layer(layer, H, finite, labels, fold, facts_code, fams, names, a, timing)
        if "iss" in metrics:
            out["iss"] += iss_layer(layer, H, finite, facts_code, fams, names, a, timing)
    out["peer"] = {"blas": blas_info(), "seconds": round(time.perf_counter() - t0, 3), "phases": {k: round(v, 3) for k, v in timing.items()}}
    text = json.dumps(out)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
