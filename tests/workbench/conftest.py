"""A real local Spark session for the bridge's tests, made once per test session.

Java is required: without it the fixture fails with a clear message (never a skip)."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def spark():
    """The bridge's own SparkSession (``workbench.spark_session``), stopped at the end."""
    if shutil.which("java") is None:
        pytest.fail("the Spark bridge tests need Java 17 on PATH (apt-get install openjdk-17-jre)")
    from workbench import spark_session

    session = spark_session()
    yield session
    session.stop()
