"""Realistic synthetic flight data: the Kaggle "Flight Prices" itineraries and an airports file.

    python -m scripts.generate_data --rows N --seed S --out DIR [--invalid-rate R]
        [--duplicate-legid-rate R]

writes DIR/itineraries.csv (27 columns, RFC-4180) and DIR/airports.csv (Opendatahub layout),
then prints one line with the rows written and the rate. The same seed and arguments give the
same bytes. Rows are drawn in fixed-size chunks, each from its own seeded generator, so memory
stays flat at any N; see scripts/datagen/ for the model and docs/queries.md for the layouts.
"""

import argparse
from pathlib import Path

from scripts.datagen.generate import DEFAULT_DUPLICATE_LEGID_RATE, generate


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1], got {text}")
    return value


def _rows(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.generate_data",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=_rows, required=True, help="data rows to write")
    parser.add_argument("--seed", type=int, required=True, help="same seed, same bytes")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--invalid-rate", type=_rate, default=0.0,
                        help="share of malformed rows (default 0)")
    parser.add_argument("--duplicate-legid-rate", type=_rate,
                        default=DEFAULT_DUPLICATE_LEGID_RATE,
                        help="share of rows repeating an earlier itinerary's legId "
                             f"(default {DEFAULT_DUPLICATE_LEGID_RATE})")
    args = parser.parse_args(argv)
    report = generate(args.out, args.rows, args.seed, args.invalid_rate,
                      args.duplicate_legid_rate)
    invalid_text = ", ".join(f"{k}={v}" for k, v in report.invalid_rows.items() if v)
    print(f"wrote {report.rows} rows ({report.invalid_total} invalid"
          f"{': ' + invalid_text if invalid_text else ''}; "
          f"{report.duplicate_legid_rows} repeated legIds) and {report.airports} airports "
          f"to {args.out} in {report.seconds:.2f} s: {report.rows_per_s:,.0f} rows/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
