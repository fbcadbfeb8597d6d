-- spawn.lua - child processes from a state whose heap is far memory:
-- io.popen and os.execute many times while the heap holds live tables.
-- Prints the checksum that the stock interpreter prints too.
local rounds = tonumber(arg and arg[1]) or 100
local t = {}
for i = 1, 20000 do t[i] = {i, tostring(i)} end
local sum = 0
for r = 1, rounds do
  local p = assert(io.popen("echo " .. r .. "; echo line2"))
  local a, b = p:read("l"), p:read("l")
  local ok, how, code = p:close()
  assert(ok and how == "exit" and code == 0, "popen close")
  assert(tonumber(a) == r and b == "line2", "popen output")
  local w = assert(io.popen("cat > /dev/null", "w"))
  w:write(string.rep("x", 10000))
  assert(w:close())
  local ok2, how2, code2 = os.execute("exit " .. (r % 5))
  assert(how2 == "exit" and code2 == r % 5 and (ok2 == true) == (r % 5 == 0), "os.execute status")
  for i = r, #t, 97 do t[i] = {i, tostring(i * 2)} end
  collectgarbage("step")
  sum = sum + tonumber(a)
end
for i = 1, #t do sum = sum + t[i][1] + #t[i][2] end
print(sum)
