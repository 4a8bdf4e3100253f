"""Lua scripts of the Redis stream store; each runs atomically inside Redis.

Reads need no script: a MULTI of HMGET (status) and XRANGE (chunks) is just as consistent.

Keys of a stream (``<p>`` is the key prefix, the braces keep them in one cluster slot):
``<p>{id}:c`` the Redis Stream of chunks, entry id ``<sequence>-0``, field ``c`` = chunk JSON;
``<p>{id}:m`` a hash: ``status``, ``seq`` (latest sequence), ``error``, ``output``, ``created``,
``updated``, ``epoch`` (fencing epoch, absent = 0), ``holder`` (the producer the stream is open
for, absent = any); ``<p>{id}:s`` a hash: step number → sequence of the step's first chunk.
Changes are announced on the pub/sub channel ``<p>{id}:n``: ``<first sequence>\\n<chunk>\\n…``
after a write, ``!<status> <sequence>`` after a status change, ``!deleted`` after a delete.
"""

ENSURE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'status', 'active', 'seq', 0, 'created', ARGV[1], 'updated', ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 1
"""

# KEYS: chunks, meta, steps. ARGV: holder, now, active ttl_ms (0: persist), channel.
# Creates the stream for the holder; or hands the stream to the holder, active again (its
# sequences go on, its error and output are cleared, its readers hear of it) and kept for the
# active TTL from now.
OPEN = """
local meta = redis.call('HMGET', KEYS[2], 'status', 'seq')
local status = meta[1]
local ttl = tonumber(ARGV[3])
if not status then
  redis.call('HSET', KEYS[2], 'status', 'active', 'seq', 0, 'created', ARGV[2], 'updated', ARGV[2], 'holder', ARGV[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
  return 1
end
redis.call('HSET', KEYS[2], 'status', 'active', 'updated', ARGV[2], 'holder', ARGV[1])
for k = 1, 3 do
  if ttl > 0 then redis.call('PEXPIRE', KEYS[k], ttl) else redis.call('PERSIST', KEYS[k]) end
end
if status ~= 'active' then
  redis.call('HDEL', KEYS[2], 'error', 'output')
  redis.call('PUBLISH', ARGV[4], '!active ' .. meta[2])
end
return 0
"""

# Fencing, shared by the scripts that write, run on ``epoch`` and ``holder`` as each script read
# them from the meta hash (with the rest of what it reads there, in one HMGET). ARGV[1] is the
# caller's epoch ('' for none), ARGV[2] the holder it writes for ('' for none). A write for
# another holder than the stream's, or with an older epoch, is refused before anything is
# touched; a newer epoch becomes the stream's.
_FENCE_TEST = """
if ARGV[2] ~= '' and holder and ARGV[2] ~= holder then
  return redis.error_reply('HELIX_SUPERSEDED ' .. epoch .. ' ' .. holder)
end
if ARGV[1] ~= '' then
  local mine = tonumber(ARGV[1])
  if mine < epoch then return redis.error_reply('HELIX_SUPERSEDED ' .. epoch) end
  if mine > epoch then redis.call('HSET', KEYS[2], 'epoch', mine) end
end
"""

# KEYS: chunks, meta, steps. ARGV: epoch, holder ('' for none).
FENCE = (
    """
local meta = redis.call('HMGET', KEYS[2], 'seq', 'epoch', 'holder')
if not meta[1] then return redis.error_reply('HELIX_NOT_FOUND') end
local epoch = tonumber(meta[2] or '0')
local holder = meta[3]
"""
    + _FENCE_TEST
    + """
return tonumber(meta[1])
"""
)

# A batch token ``<writer>:<n>`` makes a retried append idempotent: the meta hash keeps, per
# writer, ``<n> <sequence>`` of its last stored batch, and a batch already stored is not stored
# again (its reply was lost with the connection, not the batch). Every write costs Redis this
# script, so it reads the meta hash once (status, sequence, epoch, holder and the writer's last
# batch together) and writes it once; a Lua ``redis.call`` costs about as much as the command it
# makes.
# ``updated`` is the writer's clock when it made the batch (a retry keeps it), as ENSURE's and
# TRANSITION's stamps are their caller's: workers on machines whose clocks differ can stamp a
# stream out of order, and nothing reads the stamp as an order.
_APPEND = """
local writer, batch
if ARGV[3] ~= '' then
  local colon = string.find(ARGV[3], ':', 1, true)
  writer = 'w:' .. string.sub(ARGV[3], 1, colon - 1)
  batch = tonumber(string.sub(ARGV[3], colon + 1))
end
local meta = redis.call('HMGET', KEYS[2], 'status', 'seq', 'epoch', 'holder', writer or 'status')
local status = meta[1]
if not status then return redis.error_reply('HELIX_NOT_FOUND') end
if writer and meta[5] then
  local stored = meta[5]
  local space = string.find(stored, ' ', 1, true)
  if tonumber(string.sub(stored, 1, space - 1)) >= batch then return tonumber(string.sub(stored, space + 1)) end
end
local epoch = tonumber(meta[3] or '0')
local holder = meta[4]
$FENCE
if status == 'ended' or status == 'failed' then
  return redis.error_reply('HELIX_CLOSED ' .. status)
end
local n = tonumber(ARGV[5])
local base = tonumber(meta[2])
local last = base + n
for i = 1, n do
  redis.call('XADD', KEYS[1], $TRIM (base + i) .. '-0', 'c', ARGV[5 + i])
end
if n > 0 then
  local channel = string.sub(KEYS[2], 1, -2) .. 'n'
  redis.call('PUBLISH', channel, (base + 1) .. '\\n' .. table.concat(ARGV, '\\n', 6, 5 + n))
end
for j = 6 + n, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[j], base + tonumber(ARGV[j + 1]) + 1)
end
if writer then
  redis.call('HSET', KEYS[2], 'seq', last, 'updated', ARGV[4], writer, batch .. ' ' .. last)
else
  redis.call('HSET', KEYS[2], 'seq', last, 'updated', ARGV[4])
end
local ttl = $TTL
if ttl > 0 then
  if redis.call('PTTL', KEYS[1]) < ttl * 0.9 then
    for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
  elseif #ARGV > 5 + n then
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
end
return last
"""


def append_script(active_ttl_ms: int, max_length: int | None) -> str:
    """The append script for a store's settings (baked in: every write sends fewer arguments).

    KEYS: chunks, meta, steps. ARGV: epoch ('' for none), holder ('' for none), batch token ('' for
    none), now (ms, the writer's clock, as every script that stamps a stream takes it), n_chunks,
    chunk_1 .. chunk_n, then (step, index) pairs.
    Stores the chunks as sequences latest+1…, announces them, records step starts. The active
    TTL is refreshed when less than 90 % of it is left on the chunks, not on every write.
    """
    trim = f"'MAXLEN', '~', {int(max_length)}," if max_length else ""
    return _APPEND.replace("$FENCE", _FENCE_TEST).replace("$TRIM", trim).replace("$TTL", str(int(active_ttl_ms)))


# KEYS: chunks, meta, steps. ARGV: epoch ('' for none), holder ('' for none), target status,
# allowed statuses as ",a,b,", now, ttl_ms (0: persist), channel, field to set ('' for none),
# its value, '1' to clear error and output.
TRANSITION = (
    """
local meta = redis.call('HMGET', KEYS[2], 'status', 'seq', 'epoch', 'holder')
local status = meta[1]
if not status then return redis.error_reply('HELIX_NOT_FOUND') end
local epoch = tonumber(meta[3] or '0')
local holder = meta[4]
"""
    + _FENCE_TEST
    + """
if status == ARGV[3] then return 0 end
if not string.find(ARGV[4], ',' .. status .. ',', 1, true) then
  return redis.error_reply('HELIX_CLOSED ' .. status)
end
redis.call('HSET', KEYS[2], 'status', ARGV[3], 'updated', ARGV[5])
if ARGV[10] == '1' then redis.call('HDEL', KEYS[2], 'error', 'output') end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[2], ARGV[8], ARGV[9]) end
local ttl = tonumber(ARGV[6])
for k = 1, 3 do
  if ttl > 0 then redis.call('PEXPIRE', KEYS[k], ttl) else redis.call('PERSIST', KEYS[k]) end
end
redis.call('PUBLISH', ARGV[7], '!' .. ARGV[3] .. ' ' .. meta[2])
return 1
"""
)

# KEYS: chunks, meta, steps. ARGV: channel.
DELETE = """
local removed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if removed > 0 then redis.call('PUBLISH', ARGV[1], '!deleted') end
return removed
"""
