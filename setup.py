"""The one C extension (services/broker/kafka/_record_walk.c: the Kafka listener's per-record
loops); everything else is configured in pyproject.toml. `optional`: without a C compiler the
install still succeeds and records.py runs its Python loops (tests in CI insist on the C ones)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("services.broker.kafka._record_walk",
                             ["services/broker/kafka/_record_walk.c"],
                             extra_compile_args=["-O2"],
                             optional=True)])
