# tests: a stand-in with the module tree of openai/DALL-E's encoder (its attribute and class names),
# so that torch.save(module) writes the same kind of pickle encoder.pkl is.
import torch
import torch.nn as nn
from collections import OrderedDict

class Conv2d(nn.Module):
    def __init__(self, n_in, n_out, kw):
        super().__init__()
        self.n_in, self.n_out, self.kw = n_in, n_out, kw
        self.use_float16 = True
        self.w = nn.Parameter(torch.randn(n_out, n_in, kw, kw) / (n_in * kw * kw) ** 0.5)
        self.b = nn.Parameter(torch.zeros(n_out))

class EncoderBlock(nn.Module):
    def __init__(self, n_in, n_out, n_layers):
        super().__init__()
        self.n_in, self.n_out, self.n_hid = n_in, n_out, n_out // 4
        self.post_gain = 1 / (n_layers ** 2)
        self.id_path = Conv2d(n_in, n_out, 1) if n_in != n_out else nn.Identity()
        self.res_path = nn.Sequential(OrderedDict([
            ('relu_1', nn.ReLU()), ('conv_1', Conv2d(n_in, self.n_hid, 3)),
            ('relu_2', nn.ReLU()), ('conv_2', Conv2d(self.n_hid, self.n_hid, 3)),
            ('relu_3', nn.ReLU()), ('conv_3', Conv2d(self.n_hid, self.n_hid, 3)),
            ('relu_4', nn.ReLU()), ('conv_4', Conv2d(self.n_hid, n_out, 1))]))

class Encoder(nn.Module):
    def __init__(self, group_count=4, n_hid=8, n_blk_per_group=1, input_channels=3, vocab_size=32):
        super().__init__()
        self.group_count, self.n_hid, self.vocab_size = group_count, n_hid, vocab_size
        n_layers = group_count * n_blk_per_group
        blk_range = range(n_blk_per_group)
        groups = [('input', Conv2d(input_channels, n_hid, 7))]
        w = n_hid
        for g in range(group_count):
            out = n_hid * 2 ** g
            blocks = [(f'block_{i + 1}', EncoderBlock(w if i == 0 else out, out, n_layers)) for i in blk_range]
            if g < group_count - 1:
                blocks.append(('pool', nn.MaxPool2d(kernel_size=2)))
            groups.append((f'group_{g + 1}', nn.Sequential(OrderedDict(blocks))))
            w = out
        groups.append(('output', nn.Sequential(OrderedDict([('relu', nn.ReLU()), ('conv', Conv2d(w, vocab_size, 1))]))))
        self.blocks = nn.Sequential(OrderedDict(groups))
