-- Ends a node's quarantine: marks it as booted long ago. For nodes known to be new and empty.
--
-- KEYS[1]   boot marker
redis.call('SET', KEYS[1], '0')
return 1
