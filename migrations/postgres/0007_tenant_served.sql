-- Fair share across ticks (SPEC section 3): when each tenant of a pool last had a unit marked
-- submitted. The fill order ranks each tenant's pending units FIFO and, among equal ranks,
-- serves the tenant served longest ago first; without this memory, slots that free one at a
-- time would always go to the tenant that submitted first (every tenant's next unit has
-- rank 1 again, and FIFO breaks the tie).
CREATE TABLE pool_tenant_served (
    pool    TEXT   NOT NULL,
    tenant  TEXT   NOT NULL,
    last_at BIGINT NOT NULL,
    PRIMARY KEY (pool, tenant)
);
