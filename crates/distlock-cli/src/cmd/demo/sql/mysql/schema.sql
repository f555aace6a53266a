-- The demo's inventory on MySQL/MariaDB (InnoDB), dropped and created afresh before every run
-- (the parent seeds, the instances write). Only demo_* tables: distlock's own tables are never
-- touched. Columns as in sql/sqlite/schema.sql:
-- demo_product: id (1 ..= N), stock (units left; never below 0 in a correct run),
--   initial_stock, version (bumped by every write; the optimistic strategy's compare-and-swap),
--   modified_us (wall clock of the last write, in µs).
-- demo_order: one row per unit sold. demo_counter: the counter scenario's slot(s).
-- No partial index here: "first in stock" walks the primary key from the range's start.
DROP TABLE IF EXISTS demo_order, demo_product, demo_counter;

CREATE TABLE demo_product (
    id            BIGINT NOT NULL PRIMARY KEY,
    stock         BIGINT NOT NULL,
    initial_stock BIGINT NOT NULL,
    version       BIGINT NOT NULL DEFAULT 0,
    modified_us   BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB;

CREATE TABLE demo_order (
    id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    product_id BIGINT NOT NULL,
    buyer      BIGINT NOT NULL,
    instance   BIGINT NOT NULL,
    KEY demo_order_product (product_id)
) ENGINE = InnoDB;

CREATE TABLE demo_counter (
    slot    BIGINT NOT NULL PRIMARY KEY,
    value   BIGINT NOT NULL,
    version BIGINT NOT NULL DEFAULT 0
) ENGINE = InnoDB;
