"""scikit-learn estimators over gpnum's models: GPs inside pipelines, grid searches and CV.

``GPRegressor`` (exact GP regression, :class:`gpnum.GPR`), ``SVGPRegressor`` and
``SVGPClassifier`` (:class:`gpnum.SVGP` trained by :func:`gpnum.fit`) follow scikit-learn's
estimator contract: constructor arguments stored untouched, learned state in attributes ending
in ``_``, ``get_params`` / ``set_params`` (reaching into gpnum kernels: ``kernel__lengthscale``),
``clone``, pickling, and input validation through scikit-learn's own helpers. ``GPRegressor``
gives scikit-learn's ``GaussianProcessRegressor`` meanings to its arguments (``alpha``,
``optimizer``, ``n_restarts_optimizer``, ``normalize_y``) and to ``predict(X, return_std,
return_cov)`` and ``sample_y``; ``docs/sklearn.md`` says where, and why, it differs.

scikit-learn is an optional extra (``pip install gpnum[sklearn]``): ``import gpnum`` does not
import this package. Arrays are NumPy at the boundary (scikit-learn's contract); training runs on
the backend named by ``backend=`` (default ``GPNUM_BACKEND``) and results come back as NumPy.
This package therefore imports NumPy, like the data loaders: it is a host-side boundary.

Kernels take part through their specs (:mod:`gpnum.sklearn._kernels`): ``kernel__<name>`` for
each parameter and setting, ``kernel__<prefix>__<name>`` for the kernels a kernel is built from
(``kernel__0__variance`` in a sum, ``kernel__base__lengthscale`` in a Periodic); importing this
package registers the reducers that let ``pickle`` and ``clone`` copy gpnum kernels, and the
estimators pickle their fitted models as checkpoint state
(:func:`gpnum.checkpoint.model_state`).

Modules: ``_kernels`` (kernel parameter plumbing and pickling), ``_base`` (what the estimators
share), ``_gpr`` (GPRegressor), ``_svgp`` (SVGPRegressor, SVGPClassifier).
"""

from gpnum.sklearn._gpr import GPRegressor
from gpnum.sklearn._kernels import register_kernel_reducers
from gpnum.sklearn._svgp import SVGPClassifier, SVGPRegressor

__all__ = ["GPRegressor", "SVGPRegressor", "SVGPClassifier"]

register_kernel_reducers()
