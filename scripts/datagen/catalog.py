"""Reference data of the synthetic flight market, calibrated on the real Kaggle samples.

Shares, equipment mixes, fare-basis codes and rates were read off the two real samples
(itineraries_1000_a.csv, itineraries_999_b.csv, 1,999 rows) and docs/queries.md. Values that the
samples cannot show (airline names with commas, 5-segment itineraries) are marked as synthetic.
"""

from dataclasses import dataclass, field

# The 16 airports of the real dataset, with their share as origin (real sample, both files).
MAIN_AIRPORT_WEIGHTS: dict[str, float] = {
    "ATL": 134, "BOS": 146, "CLT": 140, "DEN": 129, "DFW": 143, "DTW": 126, "EWR": 102,
    "IAD": 80, "JFK": 84, "LAX": 190, "LGA": 165, "MIA": 126, "OAK": 74, "ORD": 128,
    "PHL": 100, "SFO": 133,
}

# (main airport, alternate airport of the same city, weight). ONT/DAL/TTN are the ones the real
# sample shows (ONT 65 rows, DAL 16, TTN 2); the others are the same kind of airport.
ALTERNATE_AIRPORTS: tuple[tuple[str, str, float], ...] = (
    ("LAX", "ONT", 0.50), ("LAX", "BUR", 0.05), ("LAX", "LGB", 0.04), ("LAX", "SNA", 0.04),
    ("DFW", "DAL", 0.20), ("PHL", "TTN", 0.03), ("ORD", "MDW", 0.07), ("MIA", "FLL", 0.07),
)
ALTERNATE_ROW_RATE = 0.02
# Main airports of one city: the real data has no itinerary between them.
SAME_CITY_AIRPORTS: tuple[frozenset[str], ...] = (frozenset({"JFK", "LGA", "EWR"}),)

# Segments per itinerary: 1 ~28 %, 2 ~64 %, 3 ~7.5 %, 4+ ~0.3 % (docs/queries.md: about 5,800 rows
# with three or more stopovers in the 2M sample). 5 segments is synthetic, to exercise the tail.
SEGMENT_COUNT_PROBABILITIES: dict[int, float] = {
    1: 0.28, 2: 0.6425, 3: 0.0745, 4: 0.0025, 5: 0.0005,
}
SEGMENTS_MAX = max(SEGMENT_COUNT_PROBABILITIES)

# Nonstop and 3+ segment shares by great-circle miles of the route (real sample, 500-mile
# buckets), scaled per run so that the overall mix above holds: long routes connect more.
NONSTOP_SHARE_BY_MILES: tuple[tuple[float, float], ...] = (
    (250, 0.31), (750, 0.37), (1250, 0.33), (1750, 0.25), (2250, 0.15), (2750, 0.13),
)
THREE_PLUS_SHARE_BY_MILES: tuple[tuple[float, float], ...] = (
    (250, 0.049), (750, 0.04), (1250, 0.028), (1750, 0.045), (2250, 0.13), (2750, 0.28),
)

# Share of multi-segment itineraries whose later segments fly another mainline carrier.
MIXED_CARRIER_RATE = 0.14
# Share of 3+ segment itineraries routed through a small airport by a regional carrier.
REGIONAL_HOP_RATE = 0.08
# Rows without distances outside Spirit (real sample: 6 of 1,887).
DISTANCE_MISSING_RATE_OTHERS = 0.003


@dataclass(frozen=True)
class Airline:
    """One carrier: what it is called, where it connects, what it flies."""

    code: str
    name: str
    itinerary_share: float  # share of itineraries it sells (0 for regional-only carriers)
    connections: dict[str, float]  # connecting airports with their weight
    equipment: dict[str, float]  # equipment description ('' = missing) with its weight
    fare_basis_codes: tuple[str, ...] = ()
    basic_economy_rate: float = 0.0
    fare_factor: float = 1.0
    distances_missing: bool = False  # Spirit publishes no segment distances


_AA_SPOKES = {"BNA": 0.3, "PIT": 0.2, "RDU": 0.3, "CVG": 0.1, "CMH": 0.1, "ORF": 0.1,
              "GSO": 0.1, "RIC": 0.1, "JAX": 0.1, "STL": 0.2, "IND": 0.1, "TPA": 0.2}
_UA_SPOKES = {"CLE": 0.2, "MCI": 0.1, "SAN": 0.1, "SEA": 0.2, "AUS": 0.2, "BOI": 0.05,
              "ROC": 0.05, "SYR": 0.05, "PSP": 0.05, "GEG": 0.05}
_DL_SPOKES = {"RDU": 0.2, "MCO": 0.3, "TPA": 0.1, "CVG": 0.1, "BNA": 0.1, "SAV": 0.05,
              "TYS": 0.05, "BTV": 0.05, "PWM": 0.05, "DSM": 0.05}

MAINLINE_AIRLINES: tuple[Airline, ...] = (
    Airline(
        "AA", "American Airlines", 0.305,
        {"CLT": 4.5, "DFW": 3.0, "ORD": 2.5, "PHL": 0.4, "MIA": 1.2, "DCA": 1.5, "PHX": 1.5,
         "LAX": 1.5, "JFK": 1.0, "LGA": 0.5, "BOS": 0.3, "AUS": 0.3, **_AA_SPOKES},
        {"Boeing 737-800": 364, "Airbus A321": 285, "Airbus A319": 113, "Embraer 175": 85,
         "Airbus A320": 72, "Canadair Regional Jet 900": 40, "": 34, "Boeing 737 MAX 8": 22,
         "Canadian Regional Jet 700": 19, "Embraer 190": 12, "Embraer RJ145": 11,
         "AIRBUS INDUSTRIE A321 SHARKLETS": 9, "Embraer 170": 7, "Boeing 787-8": 4,
         "Boeing 777-200": 4, "Boeing 737": 3, "BOEING 787-9": 1},
        ("M0AHZNN1", "V3AIZNN1", "L0AIZNN1", "V3AHZNN1", "V0AIZNN1", "V0AHZNN1", "L0AHZNN1",
         "G3AHZNN1", "K0AIZNN1", "L3AIZNN1", "G3AGZNN1", "V7AWZNN1", "G0AJZSN1", "G0AJZNN3",
         "Q0AJZSN3", "Y0N"),
        basic_economy_rate=0.026,
    ),
    Airline(
        "UA", "United", 0.265,
        {"ORD": 4.5, "DEN": 3.0, "IAH": 2.5, "EWR": 3.0, "SFO": 1.5, "IAD": 0.8, "LAX": 1.5,
         **_UA_SPOKES},
        {"Embraer 175 (Enhanced Winglets)": 151, "Boeing 737-900": 147, "Airbus A319": 132,
         "Boeing 737-800": 128, "Airbus A320": 106, "Boeing 737 MAX 9": 56, "Boeing 737-700": 39,
         "": 38, "Embraer 170": 37, "Boeing 757-200": 29, "Boeing 757-300": 24,
         "Boeing 737 MAX 8": 23, "Boeing 777": 13, "Canadian Regional Jet 700": 10,
         "BOEING 777-300ER": 10, "BOEING 787-9": 9, "Canadair Regional Jet": 6,
         "Boeing 767-300": 4, "Boeing 787-8": 1, "Embraer EMB-145": 1},
        ("QAA0OKEN", "VAA3AKEN", "HAA0OKEN", "QAA3AKEN", "QAA0OFEN", "VAA0AKEN", "HAA0OFEN",
         "HAA0OHEN", "QAA0KKEN", "VAA3AFEN", "QAA0OHEN", "QAA0AFEN"),
        basic_economy_rate=0.055,
    ),
    Airline(
        "DL", "Delta", 0.255,
        {"ATL": 4.0, "DTW": 1.3, "MSP": 1.5, "SLC": 2.5, "JFK": 1.0, "LGA": 1.0, "SEA": 1.2,
         "BOS": 0.7, "LAX": 1.2, **_DL_SPOKES},
        {"Airbus A321": 169, "Boeing 717": 108, "Boeing 737-900": 96,
         "Embraer 175 (Enhanced Winglets)": 85, "Canadair Regional Jet 900": 79,
         "Embraer 175": 65, "Airbus A320": 62, "Airbus A220-100": 55, "Airbus A319": 54, "": 46,
         "Boeing 737-800": 40, "Boeing 757": 21, "Boeing 757-300": 12, "Embraer 170": 9,
         "Airbus A330-200": 4, "Boeing 767": 4, "Boeing 757-200": 3, "Airbus A330-300": 3,
         "Canadair Regional Jet": 1, "AIRBUS INDUSTRIE A350-900": 1},
        ("KA0NA0MC", "HA0QA0MQ", "KAUOA0MQ", "KA3OA0MC", "QA0NA0MC", "KA7QA0MQ", "Y0N",
         "BA0QA0MQ", "QA7QA0MQ", "BA0OA0MQ", "QA0QA0MQ", "KA0NA0MQ", "LA0NX0MC", "LA0SX0MC"),
        basic_economy_rate=0.11,
    ),
    Airline(
        "NK", "Spirit Airlines", 0.057,
        {"FLL": 2.0, "LAS": 2.0, "MCO": 2.0, "DTW": 1.5, "ATL": 1.0, "DFW": 0.5, "ORD": 0.5,
         "MSY": 0.3},
        {"AIRBUS INDUSTRIE A321 SHARKLETS": 63, "AIRBUS INDUSTRIE A320 SHARKLETS": 57, "": 56,
         "Airbus A319": 37},
        ("YNR", "TA7NR", "Y0CXNR", "TA3NR", "RA7NR", "KNR", "UA7NR", "VA7NR", "VA3NR", "HNR",
         "MA3NR", "VNR"),
        fare_factor=0.55,
        distances_missing=True,
    ),
    Airline(
        "AS", "Alaska Airlines", 0.048,
        {"SEA": 4.0, "PDX": 2.0, "SFO": 1.0, "LAX": 1.0, "SAN": 0.5, "GEG": 0.1, "BOI": 0.1},
        {"Embraer 175": 45, "Boeing 737-900": 43, "Airbus A320": 36, "Boeing 737 MAX 9": 15,
         "Boeing 737-800": 12, "AIRBUS INDUSTRIE A321 SHARKLETS": 11, "Airbus A321": 5,
         "Boeing 737-700": 3, "Airbus A319": 2, "Dehavilland DHC-8 400": 1},
        ("VH3OAVMN", "LH0OAVMN", "VH0OAVMN", "KH7OASMN", "VH4OASMN", "SH2OASMN", "LH3OAVMN",
         "MH7OASMN", "BH0OASMN", "SH0OAVMN", "KH0OASMN", "LH0OAJMN"),
        basic_economy_rate=0.05,
        fare_factor=0.95,
    ),
    Airline(
        "B6", "JetBlue Airways", 0.050,
        {"JFK": 3.0, "BOS": 3.0, "FLL": 2.0, "MCO": 1.5, "LGB": 0.2, "SJC": 0.2},
        {"Embraer 190": 55, "Airbus A320": 33, "Boeing 737-800": 28, "Airbus A319-321": 27,
         "AIRBUS INDUSTRIE A321 SHARKLETS": 8, "Airbus A321": 8, "": 6, "Embraer 175": 4,
         "Airbus A319": 2, "Boeing 737 MAX 8": 2},
        ("BH0AUEL1", "VH3AUEL1", "BH3AUEL1", "VH0AUEL1", "EH0KUEL1", "VH0ABEL1", "QC0PUEL1",
         "HH0JUEL1"),
        fare_factor=0.9,
    ),
    Airline(
        "F9", "Frontier Airlines", 0.016,
        {"DEN": 3.0, "LAS": 2.0, "MCO": 2.0, "ATL": 1.0, "PHL": 1.0, "CVG": 0.3},
        {"": 37, "Airbus A321": 11, "Airbus A320": 6},
        ("Y00PXP5", "B01PXP5", "H01PXP5", "W03ZXP5", "H01PXS5", "D00PXS5", "V03PXP5", "M00XXS2",
         "S03PXS2", "Z07ZXP5", "S07YXS2", "S21VSS4"),
        fare_factor=0.55,
    ),
    Airline(
        "SY", "Sun Country Airlines", 0.004,
        {"MSP": 5.0, "LAS": 0.3, "MCO": 0.3},
        {"Boeing 737-800": 5, "": 2, "Boeing 737-700": 1},
        ("E0DACAY", "I0DACAD", "R0DACAY"),
        fare_factor=0.7,
    ),
)

# Regional carriers fly two consecutive segments through one of their small airports. The
# first three appear in the real sample; the two whose names hold a comma are synthetic (the
# real sample has none) and exist so that RFC-4180 quoting is exercised in every file.
REGIONAL_AIRLINES: tuple[Airline, ...] = (
    Airline("9K", "Cape Air", 0.0, {"UIN": 1.0, "OWB": 1.0, "CGI": 0.5, "IRK": 0.5, "HYA": 0.5},
            {"Tecnam P2012 Traveler": 6}, ("QIP",)),
    Airline("9X", "Southern Airways Express", 0.0,
            {"LNS": 1.0, "DUJ": 1.0, "BFD": 0.5, "JST": 0.5, "MSL": 0.5}, {"Cessna": 4},
            ("Q7NC",)),
    Airline("KG", "Key Lime Air", 0.0, {"TEX": 1.0}, {"Fairchild Dornier 328": 2}, ("KLA0",)),
    Airline("4B", "Boutique Air, Inc.", 0.0, {"MCK": 1.0, "PRC": 0.5, "SOW": 0.5, "TVF": 0.5},
            {"Pilatus PC-12": 3, "": 1}, ("B4Y",)),
    Airline("LF", "Contour Airlines, LLC", 0.0, {"CKB": 1.0, "MBL": 0.5, "SLK": 0.5},
            {"Embraer RJ135": 3, "": 1}, ("C0NT",)),
)
REGIONAL_AIRLINE_WEIGHTS: tuple[float, ...] = (0.3, 0.25, 0.1, 0.175, 0.175)

ALL_AIRLINES: tuple[Airline, ...] = MAINLINE_AIRLINES + REGIONAL_AIRLINES

# Cabin per itinerary (real sample: coach 99.2 %, first 0.5 %, premium coach 0.2 %, business).
CABIN_WEIGHTS: dict[str, float] = {"coach": 0.992, "first": 0.005, "premium coach": 0.002,
                                   "business": 0.001}
CABIN_FARE_FACTORS: dict[str, float] = {"coach": 1.0, "first": 2.4, "premium coach": 1.6,
                                        "business": 3.0}

# seatsRemaining as counted in the real sample.
SEATS_REMAINING_WEIGHTS: dict[int, float] = {0: 113, 1: 221, 2: 192, 3: 157, 4: 141, 5: 116,
                                             6: 89, 7: 542, 8: 34, 9: 388, 10: 6}

# totalFare cents as counted in the real sample: fares are mostly whole dollars plus the
# $5.60 September 11 fee, so ".60" dominates.
FARE_CENTS_WEIGHTS: dict[int, float] = {60: 1073, 10: 257, 61: 164, 20: 112, 58: 80, 59: 52,
                                        21: 50, 70: 49}
FARE_CENTS_OTHER_RATE = 0.08  # remaining rows get uniformly random cents

# Search dates and days from search to flight, as in the full Kaggle dataset.
SEARCH_DATE_FIRST = "2022-04-16"
SEARCH_DATE_LAST = "2022-10-05"
DAYS_AHEAD_NEAR_MAX = 10  # 61 % of rows fly within 10 days of the search (real sample)
DAYS_AHEAD_NEAR_RATE = 0.61
DAYS_AHEAD_MAX = 60


@dataclass(frozen=True)
class Timing:
    """Schedule model, fitted on the real sample.

    Block minutes = base + per_mile * miles + per_eastward_mile * (miles, signed + eastwards),
    least squares over the real segments (residual sd 9.8 min). First departure hours are the
    real histograms, nonstop and connecting apart: connections leave earlier. Layovers are
    lognormal (real quantiles 5/50/95 %: 42/134/434 min), shorter the later the itinerary
    starts, and mostly cut short enough to arrive the same day, as in the real data.
    """

    block_minutes_base: float = 51.5
    block_minutes_per_mile: float = 0.118
    block_minutes_per_eastward_mile: float = -0.0087
    block_noise_sd_minutes: float = 9.8
    block_minutes_min: int = 20
    layover_median_minutes: float = 150.0
    layover_sigma: float = 0.75
    layover_minutes_min: int = 30
    layover_minutes_max: int = 720
    # (first departure hour, layover median factor), interpolated linearly.
    layover_factor_by_hour: tuple[tuple[int, float], ...] = (
        (5, 1.15), (10, 1.15), (13, 0.9), (16, 0.7), (20, 0.6), (21, 1.0),
    )
    # Share of itineraries starting before 21:00 whose layovers are shortened (down to
    # layover_minutes_min), or whose start is moved earlier, so that they arrive before
    # midnight: real 2-segment itineraries leaving 12:00-18:00 arrive the next day only
    # 11-13 % of the time, and only 1.5 % of real itineraries land between 01:00 and 06:00.
    # A few wait overnight for their last connection instead.
    same_day_arrival_rate: float = 0.95
    same_day_last_first_hour: int = 20
    latest_arrival_around_midnight_minutes: tuple[int, int] = (-150, 60)
    overnight_connection_rate: float = 0.12
    overnight_departure_minutes: tuple[int, int] = (6 * 60, 10 * 60)  # local, next morning
    first_hour_min: int = 5  # an itinerary moved earlier to land the same day leaves after
    nonstop_departure_hour_weights: dict[int, float] = field(default_factory=lambda: {
        0: 1, 1: 1, 5: 16, 6: 30, 7: 50, 8: 48, 9: 37, 10: 42, 11: 37, 12: 40, 13: 22, 14: 24,
        15: 30, 16: 33, 17: 40, 18: 31, 19: 26, 20: 21, 21: 15, 22: 10, 23: 7})
    connecting_departure_hour_weights: dict[int, float] = field(default_factory=lambda: {
        0: 9, 5: 59, 6: 183, 7: 138, 8: 98, 9: 74, 10: 101, 11: 100, 12: 97, 13: 106, 14: 80,
        15: 59, 16: 70, 17: 71, 18: 39, 19: 27, 20: 28, 21: 27, 22: 44, 23: 28})
    round_minute_rate: float = 0.6  # departures on a multiple of 5 minutes


@dataclass(frozen=True)
class Pricing:
    """Lognormal fares whose median grows with the route's great-circle miles."""

    median_base_usd: float = 110.0
    median_usd_per_mile: float = 0.14
    sigma: float = 0.33
    route_factor_sigma: float = 0.2
    segment_count_factors: tuple[float, ...] = (1.0, 1.2, 1.45, 1.6, 1.7)
    basic_economy_factor: float = 0.8
    last_minute_days: int = 3
    last_minute_factor: float = 1.35
    short_notice_days: int = 7
    short_notice_factor: float = 1.15
    total_fare_min_usd: float = 19.0
    tax_rate: float = 0.075
    fee_per_segment_usd: float = 9.0
    fee_flat_usd: float = 5.6


TIMING = Timing()
PRICING = Pricing()

# Per-mile noise of published segment distances around the great circle (real: median +1 mi).
SEGMENT_DISTANCE_NOISE_SD_MILES = 4.0
# Hub choice weight falls as (detour ratio) ** -DETOUR_EXPONENT; tuned so that ~5 % of rows
# exceed 4x the direct distance, as in the real sample (100 of 1,999 rows).
DETOUR_EXPONENT = 3.0
# Shortest hop an itinerary makes (the real sample's shortest is PHL-EWR, 80 miles).
HOP_MILES_MIN = 70.0
