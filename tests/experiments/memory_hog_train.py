"""A hostile experiment: allocates far past any sane trial memory limit."""

blocks = []
for _ in range(96):
    blocks.append(bytearray(32 * 2**20))  # 3 GiB in all
print("---")
print("status: ok")
