-- gc_churn.lua - a GC-heavy script: tables and strings made and dropped in
-- a loop, a bounded live set. Run by the tests inside fmem.newstate and
-- under fmem-lua. Returns (and prints, when run as a script) a checksum.
local rounds = tonumber((...)) or rawget(_G, "CHURN_ROUNDS") or 40
local live = {}
local sum = 0
for r = 1, rounds do
  for i = 1, 2000 do
    local t = {r, i, tostring(i) .. ":" .. r, {i * 2}}
    live[(r * 2000 + i) % 5000 + 1] = t
    sum = sum + #t[3] + t[4][1] % 7
  end
  local parts = {}
  for i = 1, 500 do parts[i] = string.rep("x", i % 37) end
  sum = sum + #table.concat(parts)
end
live = nil
collectgarbage()
if arg and arg[0] and arg[0]:find("gc_churn") then print("checksum " .. sum) end
return sum
