"""Where the tests find the real-data samples, kept in the repository under tests/data/real/:
itineraries_1000_a.csv and itineraries_999_b.csv (1,000 and 999 rows of the Kaggle "Flight
Prices" itineraries) and airports-codepublic.csv (the Opendatahub airports file)."""

from pathlib import Path

REAL_SAMPLES_DIR = Path(__file__).resolve().parent / "data" / "real"
