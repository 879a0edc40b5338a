"""pb-accountant: certified upper and lower privacy bounds with privacy buckets."""
from .accountant import PrivacyBucketsAccountant
from .calibration import NoiseCalibration, StepsCalibration, find_noise_multiplier, find_steps
from .engine import PrivacyBuckets, compose, epsilon_bounds
from .mechanisms import (DiscretePair, Gaussian, Laplace, MechanismPair, RandomizedResponse,
                         SubsampledGaussian)
from .results import DeltaBounds, EpsilonBounds, GridInfo, PrivacyCurve, bound_text
from .samplers import NEIGHBOURING, SAMPLERS

__all__ = ["PrivacyBucketsAccountant", "compose", "epsilon_bounds", "PrivacyBuckets", "MechanismPair", "SubsampledGaussian", "Gaussian",
           "Laplace", "RandomizedResponse", "DiscretePair", "EpsilonBounds", "DeltaBounds",
           "PrivacyCurve", "GridInfo", "find_noise_multiplier", "find_steps",
           "NoiseCalibration", "StepsCalibration", "SAMPLERS", "NEIGHBOURING"]
from ._version import __version__
from .subsampled_laplace import SubsampledLaplace
from .tradeoff import TradeoffBounds, tradeoff_bounds

__all__ += ["SubsampledLaplace", "TradeoffBounds", "tradeoff_bounds", "bound_text"]

from . import _opacus_hook as _hook

_hook.install()
