"""Kept for plugins written before the pool moved: the shadow pool is ``arena.pools`` (``from arena import
train_pool, ShadowPool``)."""

from arena.pools import PoolData, PoolPlan, ShadowPool, plan_pool, train_pool  # noqa: F401
