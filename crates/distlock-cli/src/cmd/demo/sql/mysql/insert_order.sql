-- Records one unit sold.
-- params (in order): product id, buyer (the request number), instance that served it
INSERT INTO demo_order (product_id, buyer, instance) VALUES (?, ?, ?);
