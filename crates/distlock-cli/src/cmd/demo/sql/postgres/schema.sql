-- The demo's inventory on PostgreSQL, dropped and created afresh before every run (the parent
-- seeds, the instances write). Only demo_* tables: distlock's own tables are never touched.
-- Columns as in sql/sqlite/schema.sql:
-- demo_product: id (1 ..= N), stock (units left; never below 0 in a correct run),
--   initial_stock, version (bumped by every write; the optimistic strategy's compare-and-swap),
--   modified_us (wall clock of the last write, in µs).
-- demo_order: one row per unit sold. demo_counter: the counter scenario's slot(s).
DROP TABLE IF EXISTS demo_order, demo_product, demo_counter;

CREATE TABLE demo_product (
    id            BIGINT PRIMARY KEY,
    stock         BIGINT NOT NULL,
    initial_stock BIGINT NOT NULL,
    version       BIGINT NOT NULL DEFAULT 0,
    modified_us   BIGINT NOT NULL DEFAULT 0
);
-- Finding "the first item still in stock" stays a short index seek however much is sold.
CREATE INDEX demo_product_in_stock ON demo_product (id) WHERE stock > 0;

CREATE TABLE demo_order (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product_id BIGINT NOT NULL,
    buyer      BIGINT NOT NULL,
    instance   BIGINT NOT NULL
);
CREATE INDEX demo_order_product ON demo_order (product_id);

CREATE TABLE demo_counter (
    slot    BIGINT PRIMARY KEY,
    value   BIGINT NOT NULL,
    version BIGINT NOT NULL DEFAULT 0
);
