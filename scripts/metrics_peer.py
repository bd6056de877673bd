#!/usr/bin/env python3
"""ISS and KTS written the way a researcher would with NumPy and scikit-learn:
the peer that `npm run bench:metrics` times hsm against, and the second
implementation tests compare hsm's numbers with. Same definitions
(docs/metrics.md); float32 products in row blocks; LogisticRegression for the
probe. Bootstrap intervals use NumPy's generator, so they agree with hsm's only
within the intervals' tolerance.

Usage: metrics_peer.py STORE [--scored SCORED] [--metrics iss,kts] [--bootstrap B] [--seed S] [--out FILE]
"""
import argparse
import json
import sys
import time

import numpy as np


def fnv1a32(text):
    h = 0x811C9DC5
    for b in text.encode("utf-8"):
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def auroc(scores, labels, weights=None):
    if weights is None:
        weights = np.ones(len(scores))
    order = np.argsort(scores, kind="mergesort")
    s, y, w = scores[order], labels[order], weights[order]
    wins = neg_below = 0.0
    i = 0
    n = len(s)
    while i < n:
        j = i
        while j < n and s[j] == s[i]:
            j += 1
        pos = w[i:j][y[i:j] == 1].sum()
        neg = w[i:j][y[i:j] == 0].sum()
        wins += pos * (neg_below + neg / 2)
        neg_below += neg
        i = j
    tp, tn = w[y == 1].sum(), w[y == 0].sum()
    return None if tp == 0 or tn == 0 else wins / (tp * tn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--scored")
    ap.add_argument("--metrics", default="iss,kts")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--probe-c", type=float, default=0.01)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    m = json.load(open(a.store + "/index.json"))
    fams = np.array(m["condition_families"])
    facts = np.array(m["fact_ids"])
    names = sorted(set(fams) - {"anchor"})
    rng = np.random.default_rng(a.seed)
    metrics = a.metrics.split(",")
    labels = None
    if "kts" in metrics:
        lab = {}
        for line in open(a.scored):
            if line.strip():
                r = json.loads(line)
                lab[r["query_id"]] = r["label"]
        labels = np.array([1 if lab[q] == "correct" else 0 if lab[q] == "incorrect" else -1 for q in m["query_ids"]])
        fold = np.array([fnv1a32(f) % a.folds for f in facts])
    out = {"iss": [], "kts": []}
    for layer in m["layers"]:
        H = np.load("%s/L%03d.npy" % (a.store, layer)).astype(np.float32)
        finite = np.isfinite(H).all(axis=1)
        if labels is not None:
            from sklearn.linear_model import LogisticRegression

            usable = finite & (labels >= 0)
            anc = usable & (fams == "anchor")
            score = np.zeros(len(H))
            for k in range(a.folds):
                tr = anc & (fold != k)
                X = H[tr].astype(np.float64)
                mu, sd = X.mean(0), X.std(0)
                sd[sd < 1e-8] = 1
                clf = LogisticRegression(C=a.probe_c, tol=1e-8, max_iter=2000)
                clf.fit((X - mu) / sd, labels[tr])
                te = usable & (fold == k)
                score[te] = clf.decision_function((H[te].astype(np.float64) - mu) / sd)
            ga = np.where(usable & (fams == "anchor"))[0]
            auc_anchor = auroc(score[ga], labels[ga])
            for fam in ["anchor"] + names + ["all"]:
                sel = np.where(usable & ((fams != "anchor") if fam == "all" else (fams == fam)))[0]
                auc = auroc(score[sel], labels[sel])
                kts = None
                if fam != "anchor" and auc is not None and auc_anchor is not None and auc_anchor > 0.55:
                    kts = (auc - 0.5) / (auc_anchor - 0.5)
                out["kts"].append({"layer": layer, "family": fam, "n_queries": int(len(sel)), "n_correct": int(labels[sel].sum()), "auroc": auc, "kts": kts})
        if "iss" in metrics:
            X = H[finite]
            Xf, Ff = fams[finite], facts[finite]
            X = X - X.mean(0, dtype=np.float64).astype(np.float32)
            nrm = np.linalg.norm(X.astype(np.float64), axis=1)
            keep = nrm > 0
            X, Xf, Ff, nrm = X[keep], Xf[keep], Ff[keep], nrm[keep]
            X = (X / nrm[:, None]).astype(np.float32)
            af = {}
            for i in np.where(Xf == "anchor")[0]:
                af.setdefault(Ff[i], []).append(i)
            anames = list(af)
            A = np.stack([X[v[0]] if len(v) == 1 else (lambda s: s / np.linalg.norm(s))(X[v].astype(np.float64).sum(0)) for v in af.values()]).astype(np.float32)
            index = {f: g for g, f in enumerate(anames)}
            S = A.astype(np.float64).sum(0)
            F = len(A)
            q = np.array([i for i in range(len(X)) if Xf[i] != "anchor" and Ff[i] in index])
            own_idx = np.array([index[Ff[i]] for i in q])
            own = np.einsum("ij,ij->i", X[q].astype(np.float64), A[own_idx].astype(np.float64))
            other = (X[q].astype(np.float64) @ S - own) / (F - 1)
            above = np.zeros(len(q), dtype=np.int64)
            for b in range(0, len(q), 4096):
                sims = X[q[b:b + 4096]] @ A.T
                o = sims[np.arange(len(sims)), own_idx[b:b + 4096]]
                sims[np.arange(len(sims)), own_idx[b:b + 4096]] = -np.inf
                above[b:b + 4096] = (sims > o[:, None]).sum(1)
            rank = 1 + above
            for fam in names + ["all"]:
                sel = np.arange(len(q)) if fam == "all" else np.where(Xf[q] == fam)[0]
                ff = Ff[q[sel]]
                uniq, inv = np.unique(ff, return_inverse=True)
                cnt = np.bincount(inv)

                def macro(v):
                    return float((np.bincount(inv, weights=v) / cnt).mean())

                margin = own[sel] - other[sel]
                fm = np.bincount(inv, weights=margin) / cnt
                reps = [fm[rng.integers(0, len(fm), len(fm))].mean() for _ in range(a.bootstrap)]
                out["iss"].append({
                    "layer": layer, "family": fam, "n_queries": int(len(sel)), "n_facts": int(len(uniq)),
                    "iss": macro(margin), "own_cos": macro(own[sel]), "other_cos": macro(other[sel]),
                    "r_at_1": macro((rank[sel] == 1).astype(float)), "mrr": macro(1.0 / rank[sel]),
                    "iss_ci_low": float(np.percentile(reps, 2.5)), "iss_ci_high": float(np.percentile(reps, 97.5)),
                })
    text = json.dumps(out)
    if a.out:
        open(a.out, "w").write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
