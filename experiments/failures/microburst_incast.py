# Three hosts burst at line rate for 10 ms every 100 ms onto leaf p0l0's port to h1,
# from t=1 s to t=4 s; a spine link is cut in the middle of it.
burst = microburst("p0l0:h1", ["h4", "h8", "h12"], on_ms=10, every_ms=100)
cut = fail_link("p0l3-p0s2")
timeline = [
    at(1.0, burst),
    at(2.0, cut),
    at(3.0, restore(cut)),
    at(4.0, restore(burst)),
]
