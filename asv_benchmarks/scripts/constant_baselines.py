import numpy as np, gpnum
from scipy import stats
from gpnum import backend as B
p = gpnum.datasets.load("precip", split="random", seed=0)
ytr, yte = B.to_numpy(p.y_train), B.to_numpy(p.y_test)
df, loc, scale = stats.t.fit(ytr)
print(f"precip constant Student-t: df={df:.3f} loc={loc:.3f} scale={scale:.3f} test NLL={-stats.t.logpdf(yte, df, loc, scale).mean():.4f} test RMSE={np.sqrt(np.mean((yte - loc)**2)):.4f} (mean pred RMSE {np.sqrt(np.mean((yte-ytr.mean())**2)):.4f})")
e = gpnum.datasets.load("elec", split="random", seed=0)
ytr, yte = B.to_numpy(e.y_train), B.to_numpy(e.y_test)
pr = ytr.mean()
print(f"elec constant Bernoulli: p={pr:.4f} test NLL={-np.mean(yte*np.log(pr)+(1-yte)*np.log(1-pr)):.4f} accuracy={max(np.mean(yte), 1-np.mean(yte)):.4f}")
el = gpnum.datasets.load("elevators", split=0)
ytr, yte = B.to_numpy(el.y_train), B.to_numpy(el.y_test)
print(f"elevators constant Gaussian: test RMSE={np.sqrt(np.mean((yte-ytr.mean())**2)):.4f} NLL={-stats.norm.logpdf(yte, ytr.mean(), ytr.std()).mean():.4f}")
