"""Building the SparkSession."""

from icetide.spark.session import build_session

__all__ = ["build_session"]
