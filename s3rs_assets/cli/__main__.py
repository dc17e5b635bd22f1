"""`python -m s3rs_assets.cli`: the same as the `s3rs` console script."""

from s3rs_assets.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
