"""Pipeline configuration (pydantic models) and its loader."""

from icetide.config.loader import load_config, validate_config
from icetide.config.models import PipelineConfig

__all__ = ["PipelineConfig", "load_config", "validate_config"]
