#!/usr/bin/env python3
"""`docmatch choose` on the tiny real corpus (tiny_manpages.py: 240 manual
pages and their SEE ALSO links) read by all-MiniLM-L6-v2 in windows of 64
tokens, against a second formulation here:

  * every dense reader (first window, windows mean and max, MaxSim) and the
    TF-IDF hybrids and dense pairs recomputed in numpy from the windows file
    choose wrote (TF-IDF from the shards' token ids, sklearn's sublinear
    formula) rank every measured query exactly as choose's rankings/ say;
  * each fused row's weight is the grid's first best MRR on the other half
    of the queries, recomputed here;
  * the label-free proxy's MRR per reader equals numpy's matching of each
    document's first half of windows to its second halves;
  * the intervals agree with scripts/compare-rankings.py's (another random
    stream, so to 0.01) and its MRRs exactly;
  * the recipe's commands, run as written, give the chosen row's MRR on the
    measured queries (eval over the files they make);
  * a second run into the same folder reads the first one's windows and
    measures the same rows; another --windows embeds again;
  * --finetune trains on the choosing queries' pairs that touch no measured
    query (a batch of all of them embedded 32 at a time: under 6 GiB), and
    the fine-tuned windows' rows rank as numpy's; a budget that
    runs out in training stops it there, one spent before skips it;
  * a --budget spent by the embedding pass leaves out the three-way rows and
    the proxy, and says so; --prefer cheapest writes the cheapest row within
    the best's interval; a SMITH model and too few queries are refused.

usage: choose_check.py DOCMATCH FIXTURE SCRATCH
"""
import json
import os
import resource
import shutil
import subprocess
import sys

import h5py
import numpy as np
import scipy.sparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search_check import tfidf  # noqa: E402  (the TF-IDF reference the search checks hold to)

MODELS = os.environ.get("DOCMATCH_MODELS", os.path.expanduser("~/.cache/docmatch/models"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WEIGHTS = [round(0.1 * i, 1) for i in range(11)]


def check(condition, message):
    if not condition:
        sys.exit("FAILED: " + message)


def run(*args, fail=False, env=None):
    result = subprocess.run(list(args), capture_output=True, text=True, env=env)
    if fail:
        check(result.returncode != 0, f"{args[:3]} should have failed")
    elif result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def windows_of(path):
    """Each document's window vectors (float64, renormalised), in the file's order, and the ids."""
    with h5py.File(path, "r") as h:
        rows = h["sentence_vectors"][:].astype(np.float64)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        paragraphs, documents = h["paragraph_offsets"][:], h["document_offsets"][:]
        ids = [i.decode() if isinstance(i, bytes) else i for i in h["document_ids"][:]]
    return ids, [rows[paragraphs[documents[d]]:paragraphs[documents[d + 1]]] for d in range(len(ids))]


def unit(v):
    return v / max(np.linalg.norm(v), 1e-12)


def tfidf_cosines(corpus):
    """Cosines (N, N) of search_check's TF-IDF rows (sklearn's sublinear formula over the shards' token ids)."""
    rows = tfidf(corpus)
    entries = [(i, t, v) for i, row in enumerate(rows) for t, v in row.items()]
    m = scipy.sparse.csr_matrix(([v for _, _, v in entries], ([i for i, _, _ in entries], [t for _, t, _ in entries])))
    return (m @ m.T).toarray()


def reciprocal_rank(scores, query, relevant, near=0.0):
    """1 / the rank of the best relevant document, ties against it; with
    `near`, also whether another document scores within `near` of it (where
    float64 summation order may rank the two either way)."""
    scores = scores.copy()
    scores[query] = -np.inf
    best = scores[relevant].max()
    others = np.ones(len(scores), dtype=bool)
    others[relevant] = False
    rr = 1.0 / (1 + np.count_nonzero(scores > best) + np.count_nonzero((scores == best) & others))
    return (rr, np.count_nonzero(np.abs(scores[others] - best) <= near) > 0) if near else rr


def main():
    docmatch, fixture, scratch = sys.argv[1:4]
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    minilm = os.path.join(MODELS, "all-minilm-l6-v2")
    check(os.path.isfile(os.path.join(minilm, "model.safetensors")), f"no {minilm}: run scripts/install-deps.sh")
    model = os.path.join(scratch, "minilm64")
    run(docmatch, "import-hf", minilm, "--max-tokens", "64", "--output", model)
    corpus = os.path.join(scratch, "corpus")
    run(docmatch, "prepare", "--input", os.path.join(fixture, "articles.jsonl"), "--output", corpus, "--tokenizer",
        model, "--no-progress")
    related = os.path.join(fixture, "related.jsonl")
    out = os.path.join(scratch, "choose")
    said = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", related, "--windows", "4",
               "--proxy-documents", "0", "--output", out, "--no-progress").stdout
    choice = json.load(open(os.path.join(out, "choice.json")))
    rows = {row["slug"]: row for row in choice["rows"]}
    check(len(rows) == 26 and choice["chosen"] == choice["best"] and "(--prefer best): " + choice["best"] in said
          and "~: within the best's interval" in said, f"26 rows and a table:\n{said}")

    # The readers, recomputed from the windows choose embedded.
    lexical = tfidf_cosines(corpus)

    def bases_of(path):
        ids, windows = windows_of(path)
        first = np.stack([w[0] for w in windows])
        mean = np.stack([unit(w.mean(0)) for w in windows])
        top = np.stack([unit(w.max(0)) for w in windows])
        maxsim = np.array([[(a @ b.T).max(1).mean() for b in windows] for a in windows])
        return ids, windows, {"first": first @ first.T, "mean": mean @ mean.T, "max": top @ top.T, "maxsim": maxsim,
                              "tfidf": lexical}

    ids, windows, base = bases_of(os.path.join(out, "windows.h5"))
    N = len(ids)
    index = {d: i for i, d in enumerate(ids)}
    relevant = {}
    for line in open(related):
        pair = json.loads(line)
        if pair["source"] != pair["target"]:
            relevant.setdefault(index[pair["source"]], set()).add(index[pair["target"]])
    measured = [index[json.loads(line)["query"]] for line in open(rows["first"]["rankings"])]
    choosing = sorted(set(relevant) - set(measured))
    check(len(measured) == choice["queries"]["measured"] and len(choosing) == choice["queries"]["choosing_weights"],
          f"{len(measured)} measured and {len(choosing)} choosing queries: {choice['queries']}")

    def ranks(scores, queries):
        return [reciprocal_rank(scores[q], q, sorted(relevant[q])) for q in queries]

    def check_rows(rows, base):
        """Each row without BM25 ranks every measured query as `base`'s readers do; returns how many rows."""
        checked = 0
        for slug, row in rows.items():
            if "bm25" in row["weights"]:
                continue  # BM25 is eval's, held to bm25s elsewhere; its rows meet eval in the recipe check below
            theirs = [1 / json.loads(line)["first_relevant_rank"] for line in open(row["rankings"])]
            scores = sum(w * base[b] for b, w in row["weights"].items())
            for q, rr in zip(measured, theirs):
                ours, tied = reciprocal_rank(scores[q], q, sorted(relevant[q]), near=1e-9)
                check(ours == rr or tied, f"{slug}: query {ids[q]} at 1/{1 / ours:.0f} in numpy, 1/{1 / rr:.0f} in choose")
            check(abs(np.mean(theirs) - row["mrr"]) < 1e-12, f"{slug}: the file's MRR {np.mean(theirs)}, {row['mrr']}")
            checked += 1
        return checked

    checked = check_rows(rows, base)
    # Weights chosen on the other half: the grid's first best.
    for slug in ("first+tfidf", "maxsim+tfidf", "first+maxsim", "mean+max"):
        x, y = slug.split("+")
        mrr = [np.mean(ranks((1 - w) * base[x] + w * base[y], choosing)) for w in WEIGHTS]
        chosen = WEIGHTS[next(i for i, m in enumerate(mrr) if m >= max(mrr) - 1e-12)]  # the first best
        expected = {x: 1 - chosen, y: chosen} if 0 < chosen < 1 else {x if chosen == 0 else y: 1.0}
        got = {k: round(v, 9) for k, v in rows[slug]["weights"].items()}
        check(got == {k: round(v, 9) for k, v in expected.items()}, f"{slug}: weights {got}, numpy's best {expected}")

    # The proxy: each document's first half of windows finds its second half.
    proxy = choice["proxy"]
    long_docs = [d for d in range(N) if len(windows[d]) >= 2]
    halves = [(windows[d][:len(windows[d]) // 2], windows[d][len(windows[d]) // 2:]) for d in long_docs]
    pooled = {"first": lambda w: w[0], "mean": lambda w: unit(w.mean(0)), "max": lambda w: unit(w.max(0))}
    for reader in ("first", "mean", "max", "maxsim"):
        if reader == "maxsim":
            scores = np.array([[(a @ b.T).max(1).mean() for _, b in halves] for a, _ in halves])
        else:
            a = np.stack([pooled[reader](h[0]) for h in halves])
            b = np.stack([pooled[reader](h[1]) for h in halves])
            scores = a @ b.T
        rr = [1 / (1 + np.count_nonzero(scores[i] > scores[i, i]) +
                   np.count_nonzero(scores[i] == scores[i, i]) - 1) for i in range(len(halves))]
        check(abs(np.mean(rr) - proxy["readers"][reader]["mrr"]) < 1e-9,
              f"proxy {reader}: numpy {np.mean(rr):.6f}, choose {proxy['readers'][reader]['mrr']:.6f}")

    # Intervals against compare-rankings.py's (its own random stream).
    relevance_file = os.path.join(scratch, "measured.jsonl")
    with open(relevance_file, "w") as f:
        for q in measured:
            f.write(json.dumps({"query": ids[q], "relevant": [ids[d] for d in sorted(relevant[q])]}) + "\n")
    other = choice["rows"][-1]["slug"]
    lines = [json.loads(line) for line in run(
        sys.executable, os.path.join(ROOT, "scripts", "compare-rankings.py"), "--relevance", relevance_file,
        f"best={rows[choice['best']]['rankings']}", f"other={rows[other]['rankings']}").stdout.splitlines()]
    for line in lines:
        if "row" in line:
            row = rows[choice["best"] if line["row"] == "best" else other]
            check(abs(line["mrr"] - row["mrr"]) <= 5.1e-5 and
                  all(abs(a - b) < 0.01 for a, b in zip(line["ci95"], row["interval"])),
                  f"{line} against choose's {row['mrr']} {row['interval']}")
        else:
            row = rows[other]
            check(all(abs(-a - b) < 0.01 for a, b in zip(line["ci95"][::-1], row["minus_best_interval"])),
                  f"{line} against choose's {row['minus_best_interval']}")

    # The recipe, run as written, gives the chosen row's MRR on the measured queries.
    bin_dir = os.path.join(scratch, "bin")
    os.makedirs(bin_dir)
    os.symlink(os.path.abspath(docmatch), os.path.join(bin_dir, "docmatch"))
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    script = run("bash", os.path.join(out, "recipe.sh"), env=env)
    first_rank = {}
    for line in open(os.path.join(out, "recipe", "eval", "rankings.jsonl")):
        record = json.loads(line)
        first_rank[record["query"]] = record["first_relevant_rank"]
    recipe_mrr = np.mean([1 / first_rank[ids[q]] for q in measured])
    best = rows[choice["chosen"]]
    check(abs(recipe_mrr - best["mrr"]) < 2e-3, f"the recipe's eval gives {recipe_mrr:.6f} on the measured queries; "
          f"choose said {best['mrr']:.6f} for {choice['chosen']}\n{script.stdout[-2000:]}")

    # A second run into the same folder reads the first one's windows, and measures the same rows.
    again = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", related, "--windows", "4",
                "--proxy-documents", "0", "--prefer", "cheapest", "--output", out, "--no-progress")
    second = json.load(open(os.path.join(out, "choice.json")))
    check("reading the windows an earlier run embedded" in again.stderr and second["windows_reused"]
          and not choice["windows_reused"] and "reading an earlier run's windows" in again.stdout,
          f"the second run did not say it read the first run's windows:\n{again.stderr[-2000:]}")
    check({r["slug"]: r["mrr"] for r in second["rows"]} == {r["slug"]: r["mrr"] for r in choice["rows"]}
          and second["chosen"] == second["cheapest_within_best_interval"],
          "the second run's rows differ from the first's")
    # --finetune: trained on the choosing queries' pairs that touch no measured query; the fine-tuned
    # windows' readers, recomputed in numpy, rank as its rows say.
    tuned_run = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", related, "--windows", "4",
                    "--proxy-documents", "0", "--finetune", "3", "--finetune-batch-size", "100000", "--output", out,
                    "--no-progress")
    tuned = json.load(open(os.path.join(out, "choice.json")))
    # Its batch holds every training pair, embedded 32 at a time: the peak of
    # every command so far (the largest child's resident memory).
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(f"[choose_check] largest command's peak memory so far: {peak_gib:.2f} GiB", flush=True)
    check(peak_gib < 6, f"choose --finetune held {peak_gib:.2f} GiB (measured: 2.4 embedded 32 pairs at a time, "
          "18.6 all at once)")
    held_out = set(measured)
    expected_pairs = sorted((ids[q], ids[d]) for q in choosing for d in relevant[q] if d not in held_out)
    written = sorted((p["source"], p["target"]) for p in map(json.loads, open(tuned["finetune"]["pairs_file"])))
    check(written == expected_pairs and tuned["finetune"]["pairs"] == len(expected_pairs),
          f"fine-tuning pairs: {len(written)} written, {len(expected_pairs)} expected")
    # A step takes at most the pairs there are (the batch asked for is larger).
    check(tuned["finetune"]["steps"] == 3 and not tuned["finetune"]["out_of_time"] and "fine-tuned on" in tuned_run.stdout
          and f"contrastive loss on {len(expected_pairs)} of {len(expected_pairs)} training pairs" in tuned_run.stderr,
          f"fine-tuning: {tuned['finetune']}\n{tuned_run.stdout[-1500:]}\n{tuned_run.stderr[-1500:]}")
    tuned_rows = {r["slug"]: r for r in tuned["rows"] if r["slug"].startswith("tuned-")}
    check(len(tuned_rows) == 12 and len(tuned["rows"]) == 38, f"{len(tuned_rows)} fine-tuned rows of {len(tuned['rows'])}")
    _, tuned_windows, tuned_base = bases_of(os.path.join(out, "windows-finetuned.h5"))
    check(max(np.abs(a - b).max() for a, b in zip(tuned_windows, windows)) > 1e-4, "fine-tuning left the windows as they were")
    checked += check_rows(tuned_rows, tuned_base)
    # A budget that runs out while training: stopped there, checkpointed, measured.
    spent_in_training = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", related,
                            "--windows", "4", "--proxy-documents", "0", "--finetune", "100000", "--finetune-batch-size",
                            "4", "--budget", f"{json.load(open(os.path.join(out, 'windows.json')))['seconds'] + 20:.1f}s",
                            "--output", out, "--no-progress")
    ran_out = json.load(open(os.path.join(out, "choice.json")))["finetune"]
    check(ran_out["out_of_time"] and 1 <= ran_out["steps"] < 100000 and os.path.isdir(ran_out["model"])
          and "(the budget ran out)" in spent_in_training.stdout, f"a budget spent in training: {ran_out}")

    # Other --windows: embedded again.
    other = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", related, "--windows", "3",
                "--proxy-documents", "0", "--output", out, "--no-progress")
    check("reading the windows" not in other.stderr and not json.load(open(os.path.join(out, "choice.json")))["windows_reused"],
          "--windows 3 read the windows of --windows 4")

    # A budget the embedding pass spends; a SMITH model; too few queries.
    spent = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", related, "--windows", "2",
                "--budget", "0.01s", "--prefer", "cheapest", "--output", os.path.join(scratch, "budget"),
                "--no-progress").stdout
    budget = json.load(open(os.path.join(scratch, "budget", "choice.json")))
    check(len(budget["rows"]) == 20 and len(budget["not_run_for_the_budget"]) == 2 and "not run within --budget" in spent,
          f"--budget: {len(budget['rows'])} rows, {budget.get('not_run_for_the_budget')}\n{spent}")
    no_time = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", related, "--windows", "2",
                  "--budget", "0.01s", "--finetune", "5", "--output", os.path.join(scratch, "budget"), "--no-progress")
    skipped = json.load(open(os.path.join(scratch, "budget", "choice.json")))
    check("fine-tuning" in skipped["not_run_for_the_budget"] and len(skipped["rows"]) == 20
          and "not fine-tuned: the budget left no time" in no_time.stdout, f"--finetune without time: {skipped.get('finetune')}")
    # --prefer cheapest: of the rows whose difference from the best reaches 0, the fewest windows a document
    # (1 for the first window, --windows for the others, MaxSim half a window more, a lexical reader 0.1).
    def cost(weights):
        return sum({"first": 1, "mean": 2, "max": 2, "maxsim": 2.5}.get(b, 0.1) for b in weights)
    within = [r for r in budget["rows"] if r["minus_best_interval"][1] >= 0]
    cheapest = min(within, key=lambda r: (cost(r["weights"]), -r["mrr"]))
    check(budget["chosen"] == cheapest["slug"] and abs(cheapest["cost"] - cost(cheapest["weights"])) < 1e-12,
          f"--prefer cheapest chose {budget['chosen']}; of {[(r['slug'], r['cost']) for r in within]} "
          f"the cheapest is {cheapest['slug']}")
    smith = os.path.join(scratch, "smith")
    run(docmatch, "import-hf", minilm, "--kind", "smith", "--output", smith)
    err = run(docmatch, "choose", "--model", smith, "--corpus", corpus, "--relevance", related, "--output",
              os.path.join(scratch, "refused"), fail=True).stderr
    check("choose reads with a flat encoder's windows" in err, err)
    few = os.path.join(scratch, "few.jsonl")
    with open(few, "w") as f:
        for line in open(related).readlines()[:12]:
            f.write(line)
    err = run(docmatch, "choose", "--model", model, "--corpus", corpus, "--relevance", few, "--output",
              os.path.join(scratch, "few"), fail=True).stderr
    check("too few to choose by" in err, err)
    print(json.dumps({"rows": len(rows), "checked_in_numpy": checked, "measured": len(measured),
                      "best": choice["best"], "best_mrr": round(best["mrr"], 4), "recipe_mrr": round(recipe_mrr, 4),
                      "proxy_pick": proxy["pick"], "proxy_agrees": proxy["agrees"],
                      "seconds": choice["seconds"]}))


if __name__ == "__main__":
    main()
