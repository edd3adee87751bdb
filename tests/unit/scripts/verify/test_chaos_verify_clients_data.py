"""Each client its own input (clients_data.py): different sizes and rows per client, the top
files linked to client-1's so the data generator generates none, an unknown client refused."""

import pytest

from scripts.datagen.generate import AIRPORTS_FILE, FLIGHTS_FILE
from scripts.verify.clients_data import client_rows, prepare_own_data
from scripts.verify.rounds import RoundError


def test_sizes_fall_from_rows_to_a_share_of_them():
    assert [client_rows(800, 8, i) for i in range(1, 9)] == [800, 700, 600, 500, 400, 300,
                                                             200, 100]
    assert client_rows(1, 3, 3) == 1


def test_each_client_gets_its_own_files_and_reference(tmp_path):
    data = prepare_own_data(tmp_path, clients=3, rows=90, seed=5, invalid_rate=0.05)
    assert sorted(data.by_client) == ["client-1", "client-2", "client-3"]
    flights = {name: (data.of(name).directory / FLIGHTS_FILE).read_bytes()
               for name in data.by_client}
    assert len(set(flights.values())) == 3  # other seeds, other sizes
    line_counts = [len(flights[f"client-{i}"].splitlines()) for i in (1, 2, 3)]
    assert line_counts[0] > line_counts[1] > line_counts[2]
    assert all(data.of(name).directory == data.directory / name for name in data.by_client)
    for file in (FLIGHTS_FILE, AIRPORTS_FILE):
        top = data.directory / file
        assert top.is_symlink() and not top.readlink().is_absolute()
        assert top.read_bytes() == (data.directory / "client-1" / file).read_bytes()
    assert data.of("client-2").reference != data.of("client-3").reference


def test_a_client_without_its_own_input_is_refused(tmp_path):
    data = prepare_own_data(tmp_path, clients=1, rows=20, seed=1, invalid_rate=0.0)
    with pytest.raises(RoundError, match="client-2 has no input"):
        data.of("client-2")
