"""The benchmarks' shared harness: everything a ``benchmarks/bench_*.py`` script needs besides its scenario.

Why: six scripts had grown three "is another benchmark running" policies, two runner classes, a
dozen hand-built Markdown tables and imports of each other. Here each concern lives once:

- ``machine``: the one quiet-machine policy (no other benchmark, idle CPUs) and the host's description;
- ``runner``: running a tool's command, timed or not, and what a timed run measured;
- ``models``: the generated llama-like base model (cached), safetensors helpers;
- ``variants``: models derived from the base (merge experts, storage versions), cached;
- ``tools``: the mgit under test and the peer tools, each peer in its own virtual environment;
- ``report``: Markdown tables and their cells, a section's header lines, replacing a section of benchmarks/results/;
- ``cli``: the options every script shares, and the free-disk check.
- ``merges``: the merge benchmarks' shared setup and runs (mergekit and mgit on the same experts).
- ``merge_cases``: bench_merge's cases (method, K), their outcomes, the child comparing the two outputs;
- ``merge_report``: bench_merge's section (results, what each tool read, targets, how-measured text);
- ``budget_merges``: bench_budget's runs (K, tool, budget, how chunks are picked), their commands, measured;
- ``budget_report``: bench_budget's section (runs, plans, targets, how-measured text) and its chart;
- ``sameness``: whether a merge's result is another's (bit for bit, largest difference, relative error);
- ``plot``: line charts drawn with matplotlib, the same file for the same numbers;
- ``minilm``: bench_quality's real experts (all-MiniLM-L6-v2 fine-tuned per task) and their scoring;
- ``quality_merges``: bench_quality's experts committed and sketched, its merges (Python API) and their scores;
- ``quality_report``: bench_quality's section (inputs, merges, sketch cost, accuracy, targets) and its chart;
- ``scale_disk``: the disk a bench_scale run holds at its peak;
- ``scale_merges``: bench_scale's merges (K, method, tool, budget, checked out or not), their commands, measured;
- ``scale_report``: bench_scale's sections (storage, merges): tables, targets, how-measured text, the chart;
- ``targets``: a run's claims (Target records) and the targets table every report prints;
- ``context``: the run a section describes (command, workdir, versions, reps, inherited RSS);
- ``contenders``: mgit, git + git-lfs and DVC storing a model and checking it out again, as command recipes;
- ``stores``: version stores: each tool keeping a base and its versions, and what each version cost;
  a contender storing a base, then one version over it, and checking it out (bench_scale);
- ``zipnn``: the ZipNN peer (every file compressed on its own) and its sizes per version;
- ``version_costs``: what every version cost every store, and its tables (bytes, against what changed, time);
- ``transfers``: push and clone per tool and remote (mgit to a directory or `mgit serve`, DVC);
- ``light``: the light commands (``--help``, ``status``, ``log``, ``branch``) timed warm, and their floor;
- ``diff_inputs``: the diff benchmark's derived versions (a dense fine-tune, and a quarter of it over the base);
- ``torch_diff``: the usual way to compare two versions (safetensors + torch float64), the diff's yardstick,
  and the check of mgit's numbers against it.

Scripts run as ``python benchmarks/bench_X.py``, so ``benchmarks/`` is on ``sys.path`` and they
import ``harness.*``; no script imports another script. Nothing here imports torch at module level:
timed children inherit this process's memory at fork.
"""
