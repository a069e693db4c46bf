"""streamssvm's benchmarks: ``python -m bench --suite headline`` (from the repository root)
regenerates ``bench/results/SUMMARY.md``; see ``bench/README.md``.

Nothing is imported here: ``bench/__main__.py`` pins BLAS to one thread before numpy loads."""
