-- Atomic check-and-decrement: takes one unit of the first product in stock in [lowest, past) in
-- a single statement (MySQL's single-table UPDATE … ORDER BY … LIMIT).
-- params (in order): wall clock in µs, lowest id, id past the highest
-- returns: rows affected (1 if a unit was taken, 0 when the range is sold out); the id taken as
--   the statement's last insert id (`id = LAST_INSERT_ID(id)`: there is no UPDATE … RETURNING)
-- invariant: stock never goes below 0: InnoDB locks each row it scans and checks `stock > 0` on
-- its latest committed version, moving on to the next row if a concurrent buyer emptied it.
UPDATE demo_product
SET stock = stock - 1, version = version + 1, modified_us = ?, id = LAST_INSERT_ID(id)
WHERE id >= ? AND id < ? AND stock > 0
ORDER BY id
LIMIT 1;
