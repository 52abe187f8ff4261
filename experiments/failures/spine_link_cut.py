# Cut one leaf-spine link of plane 0 for two seconds.
cut = fail_link("p0l0-p0s1")
timeline = [
    at(2.0, cut),
    at(4.0, restore(cut)),
]
