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
- ``merges``: the merge benchmarks' shared setup (mergekit, a base and its experts in one repository).

Scripts run as ``python benchmarks/bench_X.py``, so ``benchmarks/`` is on ``sys.path`` and they
import ``harness.*``; no script imports another script. Nothing here imports torch at module level:
timed children inherit this process's memory at fork.
"""
