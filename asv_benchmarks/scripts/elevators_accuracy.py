import sys, time
import numpy as np
import gpnum
from gpnum.kernels import Matern52
from gpnum.likelihoods import Gaussian
name = sys.argv[1] if len(sys.argv) > 1 else "elevators"
m = int(sys.argv[2]) if len(sys.argv) > 2 else 500
epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
white = sys.argv[4] if len(sys.argv) > 4 else "cholesky"
ds = gpnum.datasets.load(name, split=0)
X, y = ds.X_train, ds.y_train
print(X.shape, ds.X_test.shape)
t0 = time.time()
Z = gpnum.inducing.kmeans(X, m, seed=0)
print("kmeans", time.time() - t0)
model = gpnum.SVGP(Matern52(lengthscale=np.ones(X.shape[1]), variance=1.0), Gaussian(variance=0.693), Z,
                   num_data=X.shape[0], whitening=white)
t0 = time.time()
hist = gpnum.fit(model, X, y, epochs=epochs, batch_size=256, lr=0.01, gamma=0.1, X_val=ds.X_test, y_val=ds.y_test, progress=True)
print("time", time.time() - t0, "steps", hist.num_steps)
print(gpnum.optim.evaluate(model, ds.X_test, ds.y_test))
