"""gpnum.distributed: points per second of one distributed objective-and-gradient, by workers."""

import time

import numpy as np

from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian
from gpnum.models import SVGP


class DistributedObjective:
    """objective_and_grad on 20,000 rows (d = 8, m = 500) held by a LocalCluster's workers."""

    params = ([1, 2],)
    param_names = ["workers"]
    timeout = 300

    def setup(self, workers):
        try:
            import dask.array as da
            import distributed
        except ImportError:  # the distributed extra is not installed
            raise NotImplementedError
        rng = np.random.default_rng(0)
        n, d, m = 20_000, 8, 500
        X = rng.uniform(-1, 1, (n, d))
        y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(n)
        self.cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                                processes=True, host="127.0.0.1",
                                                dashboard_address=None)
        self.client = distributed.Client(self.cluster)
        self.X = self.client.persist(da.from_array(X, chunks=(n // 4, d)))
        self.y = self.client.persist(da.from_array(y, chunks=n // 4))
        self.model = SVGP(Matern52(lengthscale=np.ones(d)), Gaussian(variance=0.1), X[:m].copy(),
                          num_data=n)
        self.n = n

    def teardown(self, workers):
        self.client.close()
        self.cluster.close()

    def time_objective_and_grad(self, workers):
        from gpnum.distributed import objective_and_grad
        objective_and_grad(self.model, self.X, self.y, self.client)

    def track_points_per_second(self, workers):
        from gpnum.distributed import objective_and_grad
        t0 = time.perf_counter()
        objective_and_grad(self.model, self.X, self.y, self.client)
        return self.n / (time.perf_counter() - t0)

    track_points_per_second.unit = "points/s"
