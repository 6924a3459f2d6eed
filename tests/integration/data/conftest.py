"""The data tests' autouse fixture; their session fixtures are registered once for both tiers in ``tests/conftest.py``
(``tests/helpers/data_fixtures.py``)."""

from tests.helpers.data_fixtures import workers_even_for_small_jobs  # noqa: F401
