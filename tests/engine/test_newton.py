"""Newton solver: reaches the optimum to 1e-10 and agrees with scikit-learn."""

import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from arena.engine.newton import fit_logreg, gradient


def _grad_norms(X, y, params, l2):
    return torch.cat([g.flatten(1) for g in gradient(X, y, params, l2)], dim=1).norm(dim=1)


def _sklearn_probs(X, y, l2):
    """sklearn's fit of the same objective; binary sklearn fits one vector w = W[:,1] - W[:,0]

    and at our optimum W = [-w/2, w/2], so (l2/2)||W||^2 = (l2/4)||w||^2, i.e. C = 2/(n l2).
    """
    n, binary = len(y), int(y.max()) == 1
    C = (2.0 if binary else 1.0) / (n * l2)
    clf = LogisticRegression(C=C, tol=1e-12, max_iter=10_000, solver="newton-cholesky")
    return torch.from_numpy(clf.fit(X.numpy(), y.numpy()).predict_proba(X.numpy()))


@pytest.mark.slow
def test_binary_breast_cancer_optimum_and_sklearn():
    data = load_breast_cancer()
    X = torch.from_numpy(StandardScaler().fit_transform(data.data))
    y = torch.from_numpy(data.target).long()
    subsets = [torch.arange(0, 400), torch.arange(169, 569)]  # two models, different data
    Xk, yk = torch.stack([X[s] for s in subsets]), torch.stack([y[s] for s in subsets])
    l2 = 1e-3
    W, b = fit_logreg(Xk, yk, n_classes=2, l2=l2)
    assert W.dtype == torch.float64 and W.shape == (2, 30, 2) and b.shape == (2, 2)
    assert (_grad_norms(Xk, yk, [W, b], l2) <= 1e-10).all()
    for k in range(2):
        probs = torch.softmax(Xk[k] @ W[k] + b[k], -1)
        torch.testing.assert_close(probs, _sklearn_probs(Xk[k], yk[k], l2), rtol=0, atol=1e-6)


@pytest.mark.slow
def test_ten_classes_optimum_and_sklearn():
    g = torch.Generator().manual_seed(0)
    K, n, d, C, l2 = 3, 300, 8, 10, 1e-2
    X = torch.randn(K, n, d, generator=g, dtype=torch.float64)
    y = (X @ torch.randn(K, d, C, generator=g, dtype=torch.float64)).argmax(-1)
    params = fit_logreg(X, y, n_classes=C, l2=l2)
    assert (_grad_norms(X, y, params, l2) <= 1e-10).all()
    torch.testing.assert_close(params[1].sum(-1), torch.zeros(K, dtype=torch.float64))
    for k in range(K):
        probs = torch.softmax(X[k] @ params[0][k] + params[1][k], -1)
        torch.testing.assert_close(probs, _sklearn_probs(X[k], y[k], l2), rtol=0, atol=1e-6)


def test_gradient_matches_autograd():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(2, 20, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (2, 20), generator=g)
    W = torch.randn(2, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(2, 4, dtype=torch.float64, generator=g, requires_grad=True)
    logits = X @ W + b.unsqueeze(1)
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(1)
    (loss + 0.5 * 0.3 * W.square().sum((1, 2))).sum().backward()
    gW, gb = gradient(X, y, [W.detach(), b.detach()], l2=0.3)
    torch.testing.assert_close(gW, W.grad)
    torch.testing.assert_close(gb, b.grad)


def test_separable_data_without_penalty_fails_loudly():
    X = torch.tensor([[[-2.0], [-1.0], [1.0], [2.0]]], dtype=torch.float64)
    y = torch.tensor([[0, 0, 1, 1]])
    with pytest.raises(RuntimeError, match="did not converge"):
        fit_logreg(X, y, n_classes=2, l2=0.0, max_iter=20)


@pytest.mark.parametrize("n_classes", [2, 3, 5])
def test_hessian_matches_autograd(n_classes):
    """The block-assembled Hessian equals autograd's, plus the documented null-direction term I_D ⊗ 11ᵀ/C."""
    from arena.engine.newton import _hessian, _objective, design

    g = torch.Generator().manual_seed(n_classes)
    K, n, d, l2 = 2, 15, 3, 0.3
    Xt = design(torch.randn(K, n, d, generator=g, dtype=torch.float64))
    Y = torch.nn.functional.one_hot(torch.randint(0, n_classes, (K, n), generator=g), n_classes).double()
    theta = torch.randn(K, d + 1, n_classes, generator=g, dtype=torch.float64)
    null = torch.kron(torch.eye(d + 1, dtype=torch.float64), torch.full((n_classes, n_classes), 1.0 / n_classes))
    H = _hessian(Xt, theta, l2)
    for k in range(K):
        def f(t, k=k):
            return _objective(Xt[k : k + 1], Y[k : k + 1], t.reshape(1, d + 1, n_classes), l2)[0]

        expected = torch.autograd.functional.hessian(f, theta[k].reshape(-1))
        torch.testing.assert_close(H[k], expected + null)
