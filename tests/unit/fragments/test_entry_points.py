"""Python fragments through the ``fedload.fragments`` entry points: the catalogue's three, and
a distribution of a participant's own, checked against its registered version."""

from __future__ import annotations

import pytest

from spark_jobs.fragments import catalogue, network_monitoring
from spark_jobs.fragments.python import (
    FragmentUnavailable,
    allowed_distributions,
    entry_points,
    is_allowed,
    load_function,
)
from tests.unit.fragments import fragment_dist


@pytest.fixture
def dist(tmp_path):
    yield fragment_dist.install(tmp_path)
    fragment_dist.uninstall(tmp_path)


def test_catalogue_names_are_fedloads_entry_points():
    found = entry_points("fedload")
    assert set(found) == set(catalogue.PARAMETERS)
    assert catalogue.function("connections_per_source") is network_monitoring.connection_counts
    assert catalogue.function("distinct_ports_per_source") is (
        network_monitoring.distinct_port_counts
    )
    assert catalogue.function("prefix_scanners") is network_monitoring.prefix_scanner_counts


def test_catalogue_build_binds_parameters_with_the_registrys_defaults():
    built = catalogue.build("prefix_scanners", {"window_seconds": "4"})
    assert built.func is network_monitoring.prefix_scanner_counts  # type: ignore[attr-defined]
    assert built.keywords == {"window_seconds": 4, "min_scanners": 1}  # type: ignore[attr-defined]


def test_an_unknown_catalogue_name_is_refused():
    with pytest.raises(catalogue.UnknownFragment):
        catalogue.build("generator", {})


def test_a_function_of_an_installed_distribution_loads_at_its_version(dist):
    function = load_function(
        f"{fragment_dist.MODULE}:hot_readings", fragment_dist.NAME, fragment_dist.VERSION
    )
    assert function.__name__ == "hot_readings"
    # Spelled another way, the distribution is the same one.
    assert load_function(f"{fragment_dist.MODULE}:per_station", "Fedload_Test.Fragments")


def test_another_version_is_refused_with_both_versions(dist):
    with pytest.raises(FragmentUnavailable, match=r"registered with .* 9\.9, this agent has 1\.2"):
        load_function(f"{fragment_dist.MODULE}:hot_readings", fragment_dist.NAME, "9.9")


def test_a_module_the_distribution_does_not_provide_is_refused(dist):
    with pytest.raises(FragmentUnavailable, match="does not provide module 'json'"):
        load_function("json:dumps", fragment_dist.NAME)


def test_a_missing_distribution_or_function_is_refused(dist):
    with pytest.raises(FragmentUnavailable, match="not installed"):
        load_function(f"{fragment_dist.MODULE}:hot_readings", "no-such-dist")
    with pytest.raises(FragmentUnavailable, match="no function 'nothing'"):
        load_function(f"{fragment_dist.MODULE}:nothing", fragment_dist.NAME)


def test_fedload_is_always_allowed_and_names_compare_canonically():
    assert allowed_distributions([]) == frozenset({"fedload"})
    assert allowed_distributions(["My_Dist"]) == frozenset({"fedload", "my-dist"})
    assert is_allowed("fedload", [])
    assert is_allowed("my.dist", ["My_Dist"])
    assert not is_allowed("other", ["My_Dist"])
