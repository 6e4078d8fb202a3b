-- Reads the state of every rule of a batch of peeks (a peek writes nothing), one script call for
-- all the peeks a process made in one turn of its event loop; the caller decides each peek with evaluate.ts, exactly
-- as check.lua would in 'peek' mode. Values go back as Redis stores them (a counter may hold a
-- fraction), so nothing is rounded on the way.
-- KEYS: per rule of every peek: counter key, ban key.
-- ARGV: per rule: distinct ('1'|'0'), member (distinct rules; '' otherwise), ban ('1' when the
--       rule bans, so its ban key is read; '0' otherwise).
-- Reply: per rule: count (plain: the stored value or 0; distinct: the set size), ban end (stored
--        value or 0), member (1 when the distinct value is already in the set, else 0).
-- A key of the wrong type (another writer under the prefix) answers '-', which the caller reads as
-- no number: only that peek fails, not every peek of the batch (as count.lua does for checks).
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' then return '-' end
  return r
end
local out = {}
local rules = #KEYS / 2
for i = 1, rules do
  local ckey = KEYS[(i - 1) * 2 + 1]
  local bkey = KEYS[(i - 1) * 2 + 2]
  local a = (i - 1) * 3
  local distinct = ARGV[a + 1] == '1'
  local banUntil = 0
  if ARGV[a + 3] == '1' then banUntil = read('GET', bkey) or 0 end
  if distinct then
    out[#out + 1] = read('SCARD', ckey)
    out[#out + 1] = banUntil
    out[#out + 1] = read('SISMEMBER', ckey, ARGV[a + 2])
  else
    out[#out + 1] = read('GET', ckey) or 0
    out[#out + 1] = banUntil
    out[#out + 1] = 0
  end
end
return out
