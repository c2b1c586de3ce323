"""The benchmarks' shared harness: everything a ``benchmarks/bench_*.py`` script needs besides its scenario.

Why: six scripts had grown three "is another benchmark running" policies, two runner classes, a
dozen hand-built Markdown tables and imports of each other. Here each concern lives once:

- ``machine``: the one quiet-machine policy (no other benchmark, idle CPUs) and the host's description;
- ``runner``: running a tool's command, timed or not, and what a timed run measured;
- ``models``: the generated llama-like base model (cached), safetensors helpers;
- ``variants``: models derived from the base (merge experts, storage versions), cached;
- ``tools``: the mgit under test and the peer tools, each peer in its own virtual environment;
- ``report``: Markdown tables, a section's header lines, replacing a section of benchmarks/results/;
- ``cli``: the options every script shares, and the free-disk check.
- ``sameness``: whether a merge's result is another's (bit for bit, largest difference, relative error);
- ``plot``: line charts drawn with matplotlib, the same file for the same numbers;
- ``minilm``: bench_quality's real experts (all-MiniLM-L6-v2 fine-tuned per task) and their scoring;
- ``scale_disk``: the disk a bench_scale run holds at its peak;
- ``merges``: the merge benchmarks' shared setup and runs (mergekit and mgit on the same experts).

Scripts run as ``python benchmarks/bench_X.py``, so ``benchmarks/`` is on ``sys.path`` and they
import ``harness.*``; no script imports another script. Nothing here imports torch at module level:
timed children inherit this process's memory at fork.
"""
