"""Side-by-side measurements of the package's pipelines, each printing a table; the record is one page a benchmark
under benchmarks/records/, indexed by benchmarks/README.md.

Run each as a module from the repository root: `python -m benchmarks.scifact_recipe --help`."""
