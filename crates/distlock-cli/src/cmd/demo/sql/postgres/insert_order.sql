-- Records one unit sold.
-- params: $1 product id, $2 buyer (the request number), $3 instance that served it
INSERT INTO demo_order (product_id, buyer, instance) VALUES ($1, $2, $3);
