-- Forgets the demo's fences (distlock::fence::SqlFence rows of its resources, named demo-*)
-- when the demo's tables are created afresh: the data they guarded is gone, and a lock store
-- whose tokens start lower (another --lock-url than the last run's) must not be refused.
-- Same text in every dialect; no params.
DELETE FROM distlock_fences WHERE resource LIKE 'demo-%'
