-- The demo's inventory, created afresh before every run (the parent seeds, the instances write).
--
-- demo_product: one row per item on sale. The sources' product table.
--   id             1 ..= N
--   stock          units left; the audit checks it never goes below 0
--   initial_stock  units at the start (1 in the stock scenario)
--   version        bumped by every write; what the optimistic strategy compares and swaps
--   modified_us    wall clock of the last write, in µs (the sources' "modified time")
-- demo_order: one row per unit sold (the sources' order and order item, merged: one unit each).
-- demo_counter: the counter scenario; one slot, or S slots when the segmented strategy splits
--   it, the counter's value being their sum.
DROP TABLE IF EXISTS demo_order;
DROP TABLE IF EXISTS demo_product;
DROP TABLE IF EXISTS demo_counter;

CREATE TABLE demo_product (
    id            INTEGER PRIMARY KEY NOT NULL,
    stock         INTEGER NOT NULL,
    initial_stock INTEGER NOT NULL,
    version       INTEGER NOT NULL DEFAULT 0,
    modified_us   INTEGER NOT NULL DEFAULT 0
);
-- Finding "the first item still in stock" stays a short index seek however much is sold.
CREATE INDEX demo_product_in_stock ON demo_product (id) WHERE stock > 0;

CREATE TABLE demo_order (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    product_id INTEGER NOT NULL,
    buyer      INTEGER NOT NULL,
    instance   INTEGER NOT NULL
);
CREATE INDEX demo_order_product ON demo_order (product_id);

CREATE TABLE demo_counter (
    slot    INTEGER PRIMARY KEY NOT NULL,
    value   INTEGER NOT NULL,
    version INTEGER NOT NULL DEFAULT 0
);
