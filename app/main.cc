#include <cstdio>
int main() { std::puts("unmask"); return 0; }
