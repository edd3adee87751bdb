"""One chunk of generated rows as numpy arrays: the layout every generator stage shares.

Times are whole minutes since `network.EPOCH0` (UTC); days are whole days since that instant.
Row fields hold one entry per row. Segment fields hold one entry per flight segment, the
segments of a row back to back and in flight order: row i owns entries
`segment_start[i]:segment_start[i + 1]`, and `segment_count[i] >= 1`.
"""

from dataclasses import dataclass, fields

import numpy as np

SEGMENT_FIELDS: tuple[str, ...] = (
    "dep_node", "arr_node", "airline", "equipment", "dep_utc_minute", "arr_utc_minute",
    "dep_offset_minutes", "arr_offset_minutes", "distance_miles",
)


@dataclass
class ItineraryChunk:
    """Every field of a chunk of rows (see the module doc for the layout)."""

    leg_id: np.ndarray  # (rows, 16) uint8, printed as 32 hex digits
    search_day: np.ndarray
    flight_day: np.ndarray  # local date of the first departure
    start_node: np.ndarray  # startingAirport (a main airport)
    dest_node: np.ndarray  # destinationAirport (a main airport)
    primary_airline: np.ndarray
    fare_basis: np.ndarray  # index into itineraries.FARE_BASIS_CODES
    cabin: np.ndarray  # index into itineraries.CABINS
    basic_economy: np.ndarray
    segment_count: np.ndarray
    distances_known: np.ndarray
    travel_minutes: np.ndarray
    elapsed_days: np.ndarray
    # Segment fields (one entry per segment):
    dep_node: np.ndarray
    arr_node: np.ndarray
    airline: np.ndarray
    equipment: np.ndarray  # index into itineraries.EQUIPMENT
    dep_utc_minute: np.ndarray
    arr_utc_minute: np.ndarray
    dep_offset_minutes: np.ndarray  # UTC offset of the departure airport at departure
    arr_offset_minutes: np.ndarray
    distance_miles: np.ndarray  # published distance (meaningful where distances_known)
    # Drawn last, by fares.price:
    seats_remaining: np.ndarray | None = None
    total_fare_cents: np.ndarray | None = None
    base_fare_cents: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return len(self.segment_count)

    @property
    def segment_start(self) -> np.ndarray:
        """rows + 1 offsets into the segment fields."""
        return np.concatenate(([0], np.cumsum(self.segment_count)))

    def gather(self, rows: np.ndarray) -> "ItineraryChunk":
        """A chunk whose row i is this chunk's row `rows[i]`, segments included."""
        start = self.segment_start
        counts = self.segment_count[rows]
        new_start = np.concatenate(([0], np.cumsum(counts)))
        segments = np.repeat(start[rows] - new_start[:-1], counts) + np.arange(new_start[-1])
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                value = value[segments] if f.name in SEGMENT_FIELDS else value[rows]
            values[f.name] = value
        return ItineraryChunk(**values)
