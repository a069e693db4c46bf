"""Turn the stderr logs of bench/gdmm_multilabel.py (one JSON record per evaluation point) into
bench/results files, for runs stopped before they finished (the script writes its own results
only at the end).

    python bench/gdmm_log_to_results.py NAME LOG [LOG ...]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    name, logs = sys.argv[1], sys.argv[2:]
    curves, notes = {}, []
    for path in logs:
        for line in open(path):
            head, _, rest = line.partition(" ")
            if rest.startswith("{"):
                curves.setdefault(head, []).append(json.loads(rest))
            elif line.strip():
                notes.append(line.strip())
    stem = os.path.join(HERE, "results", f"gdmm_multilabel_{name}")
    with open(stem + ".json", "w") as f:
        json.dump({"partial": True, "logs": logs, "notes": notes, "curves": curves}, f, indent=1)
    lines = [f"# {name} (partial: runs stopped at the session deadline; from the logs)", ""] + \
            [f"- {n}" for n in notes] + ["",
             "| learner | passes | CPU s | wall s | primal | dual | gap | local-polytope dual | "
             "consistency residual | active factors | test Hamming | test micro-F1 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lr, cur in curves.items():
        for r in cur:
            f = lambda k: (f"{r[k]:.5g}" if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)  # noqa: E731
                           else "-")
            lines.append(f"| {lr} | {r['passes']} | {f('cpu_s')} | {f('wall_s')} | {f('primal')} | {f('dual')} | "
                         f"{f('gap')} | {f('dual_local_polytope')} | {f('consistency_residual')} | "
                         f"{f('active_factors')} | {f('hamming_loss')} | {f('micro_f1')} |")
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
