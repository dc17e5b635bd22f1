"""s3rs benchmarks: `make bench` or `.venv/bin/python -m benchmarks.run --help`."""
