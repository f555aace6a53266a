-- Atomic increment: the store adds one itself, so no update can be lost.
-- params: slot
UPDATE demo_counter SET value = value + 1, version = version + 1 WHERE slot = ?;
