"""Deprecated alias of :mod:`gpnum.models` (the models moved there before the 0.1.0 release;
GPR and SGPR are not variational, so the old name did not say what the folder holds). Import
from ``gpnum`` or ``gpnum.models`` instead; this alias will be removed in a later release."""

import warnings

from gpnum.models import *  # noqa: F403
from gpnum.models import __all__  # noqa: F401

warnings.warn("gpnum.variational is now gpnum.models; import from gpnum or gpnum.models",
              DeprecationWarning, stacklevel=2)
