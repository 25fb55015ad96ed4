"""Hidden Markov models: exact inference by parallel scans, batch and stochastic variational Bayes.

- :func:`forward_backward`, :func:`viterbi`: log-space, batched over leading axes, associative
  scans over time (O(log T) depth); forward-backward also as speculative blocks checked
  against each other (``method="blocked"``, O(T K) work, the default for long chains on a CPU);
  the sequential recursions as ``method="sequential"``.
- :class:`GaussianHMM`, :class:`CategoricalHMM`: conjugate mean-field VB, ``fit(Y, method="vb")``
  or ``fit(Y, method="svi", ...)`` with subchains and GrowBuf (Foti et al. 2014).

See ``docs/hmm.md``.
"""

from gpnum.hmm._inference import ForwardBackwardResult, forward_backward
from gpnum.hmm._models import CategoricalHMM, GaussianHMM
from gpnum.hmm._viterbi import viterbi

__all__ = ["CategoricalHMM", "ForwardBackwardResult", "GaussianHMM", "forward_backward", "viterbi"]
