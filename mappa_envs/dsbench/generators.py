"""The tables behind the built-in DSBench tasks: seeded generators, one per task.

Every value, including every coefficient that links the features to the target, is drawn from the
`rng` the caller passes; `builtin.py` seeds it with a secret kept on the host. So no test label can be
looked up: no row comes from a dataset the sandbox can read (six tasks carry the column names of
well-known scikit-learn/statsmodels datasets, but none of their rows, and their feature-target
relations are drawn, not copied; `lookalike.py` checks that the public copies predict nothing), and
the generator code alone cannot reproduce the answers without the seed.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

Rng = np.random.Generator


def _labels(rng: Rng, n: int, shares: list[float]) -> np.ndarray:
    return rng.choice(len(shares), n, p=np.array(shares) / sum(shares))


def _class_features(rng: Rng, label: np.ndarray, columns: dict[str, tuple[float, float, int]],
                    separation: float) -> pd.DataFrame:
    """Columns name -> (center, spread, decimals): per-class shifts of secret size and sign, a shared
    latent factor (so columns correlate) and noise; positive centers stay positive."""
    n, k = len(label), int(label.max()) + 1
    latent = rng.normal(0, 1, n)
    out = {}
    for name, (center, spread, decimals) in columns.items():
        shift = rng.normal(0, separation, k)[label]
        values = center + spread * (rng.uniform(-0.6, 0.6) * latent + shift + rng.normal(0, 0.8, n))
        if center > 0:
            values = np.abs(values)
        out[name] = np.round(values, decimals)
    return pd.DataFrame(out)


def breast_cancer(rng: Rng, n: int = 569) -> pd.DataFrame:
    label = _labels(rng, n, [0.63, 0.37])  # 1 = malignant
    base = {"radius": (14.1, 3.5, 3), "texture": (19.3, 4.3, 2), "perimeter": (92.0, 24.3, 2),
            "area": (655.0, 352.0, 1), "smoothness": (0.096, 0.014, 5), "compactness": (0.104, 0.053, 5),
            "concavity": (0.089, 0.080, 5), "concave_points": (0.049, 0.039, 5), "symmetry": (0.181, 0.027, 4),
            "fractal_dimension": (0.063, 0.007, 5)}
    columns = {}
    for prefix, scale in (("mean_{}", 1.0), ("{}_error", 0.12), ("worst_{}", 1.25)):
        for name, (center, spread, decimals) in base.items():
            columns[prefix.format(name)] = (center * scale, spread * scale, decimals)
    df = _class_features(rng, label, columns, separation=0.35)
    flip = rng.random(n) < 0.04  # a few mislabelled biopsies
    for col in ("mean_texture", "worst_smoothness", "mean_symmetry", "area_error"):  # sensor drop-outs
        df.loc[rng.random(n) < 0.06, col] = np.nan
    df["diagnosis"] = np.where(label ^ flip, "M", "B")
    return df


def wine(rng: Rng, n: int = 178) -> pd.DataFrame:
    label = _labels(rng, n, [0.33, 0.40, 0.27])
    columns = {"alcohol": (13.0, 0.8, 2), "malic_acid": (2.3, 1.1, 2), "ash": (2.4, 0.27, 2),
               "alcalinity_of_ash": (19.5, 3.3, 1), "magnesium": (100.0, 14.0, 0), "total_phenols": (2.3, 0.6, 2),
               "flavanoids": (2.0, 1.0, 2), "nonflavanoid_phenols": (0.36, 0.12, 2), "proanthocyanins": (1.6, 0.57, 2),
               "color_intensity": (5.1, 2.3, 2), "hue": (0.96, 0.23, 3), "od280_od315_of_diluted_wines": (2.6, 0.7, 2),
               "proline": (750.0, 315.0, 0)}
    df = _class_features(rng, label, columns, separation=0.9)
    df["cultivar"] = np.array(["Barolo", "Grignolino", "Barbera"])[label]
    return df


def digits(rng: Rng, n: int = 1500) -> pd.DataFrame:
    """8x8 glyphs: each class is a secret random pattern of strokes, drawn shifted, faded and noisy."""
    label = rng.integers(0, 10, n)
    yy, xx = np.mgrid[0:10, 0:10]
    prototypes = np.zeros((10, 10, 10))
    for k in range(10):
        for _ in range(3):  # three soft strokes per glyph
            (y0, x0), (y1, x1) = rng.uniform(1, 8, (2, 2))
            for t in np.linspace(0, 1, 8):
                cy, cx = y0 + t * (y1 - y0), x0 + t * (x1 - x0)
                prototypes[k] += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 1.2)
        prototypes[k] = 16 * prototypes[k] / prototypes[k].max()
    dy, dx = rng.integers(0, 3, n), rng.integers(0, 3, n)
    images = np.stack([prototypes[k, a:a + 8, b:b + 8] for k, a, b in zip(label, dy, dx)])
    images = images * rng.uniform(0.6, 1.1, (n, 1, 1)) + rng.normal(0, 2.5, images.shape)
    pixels = np.clip(np.round(images), 0, 16).astype(int).reshape(n, 64)
    df = pd.DataFrame(pixels, columns=[f"pixel_{i}" for i in range(64)])
    df["digit"] = label
    return df


def diabetes(rng: Rng, n: int = 442) -> pd.DataFrame:
    age = np.round(np.clip(rng.normal(48.5, 13, n), 19, 79))
    sex = rng.choice(["female", "male"], n)
    bmi = np.round(np.clip(rng.normal(26.4, 4.4, n), 18, 42.2), 1)
    bp = np.round(np.clip(rng.normal(94.6, 13.8, n) + 0.3 * (bmi - 26), 62, 133))
    tc = np.round(np.clip(rng.normal(189, 34.6, n), 97, 301))
    ldl = np.round(np.clip(0.6 * tc + rng.normal(2, 20, n), 41.6, 242.4), 1)
    hdl = np.round(np.clip(rng.normal(49.8, 12.9, n) - 0.4 * (bmi - 26), 22, 99))
    tch = np.round(np.clip(tc / hdl + rng.normal(0, 0.4, n), 2, 9.09), 2)
    ltg = np.round(np.clip(rng.normal(4.64, 0.52, n), 3.26, 6.11), 4)
    glucose = np.round(np.clip(rng.normal(91.3, 11.5, n) + 0.5 * (bmi - 26), 58, 124))
    z = {k: (v - v.mean()) / v.std() for k, v in
         {"age": age, "bmi": bmi, "bp": bp, "tc": tc, "ltg": ltg, "hdl": hdl, "glucose": glucose}.items()}
    w = rng.normal(0, 1, 7) * np.array([0.3, 1.0, 0.7, 0.3, 1.0, 0.5, 0.4])  # secret effects
    signal = sum(wk * zk for wk, zk in zip(w, z.values())) + 0.6 * rng.choice([-1, 1]) * (sex == "male")
    signal += 0.5 * np.abs(w[1]) * np.maximum(z["bmi"], 0) ** 2  # a non-linear bit for the trees
    progression = np.round(np.clip(152 + 77 * (signal + rng.normal(0, 0.6, n)) / (signal.std() + 0.6), 25, 346))
    return pd.DataFrame({"age": age, "sex": sex, "bmi": bmi, "blood_pressure": bp, "tc": tc, "ldl": ldl, "hdl": hdl,
                         "tch": tch, "ltg": ltg, "glucose": glucose, "progression": progression})


def _z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-9)


def affairs(rng: Rng, n: int = 4000) -> pd.DataFrame:
    jobs = np.array(["student", "farming", "white-collar", "teacher", "managerial", "professional"])
    faith = np.array(["not", "mildly", "fairly", "strongly"])
    age = np.round(np.clip(rng.normal(29, 6.8, n), 17.5, 42) * 2) / 2
    yrs = np.round(np.clip(age - 18 - rng.gamma(2, 2, n), 0.5, 23) * 2) / 2
    children = np.round(np.clip(rng.poisson(yrs / 6), 0, 5.5))
    rate = rng.choice([1, 2, 3, 4, 5], n, p=[0.02, 0.05, 0.15, 0.35, 0.43]).astype(float)
    religious = rng.integers(0, 4, n)
    educ = rng.choice([9, 12, 14, 16, 17, 20], n, p=[0.02, 0.3, 0.35, 0.2, 0.08, 0.05]).astype(float)
    occ, occ_h = rng.integers(0, 6, n), rng.integers(0, 6, n)
    w = rng.normal(0, 0.6, 5)  # secret effects of rating, years, age, children, education
    logit = (-0.9 + sum(wk * _z(x) for wk, x in zip(w, (rate, yrs, age, children, educ)))
             + rng.normal(0, 0.4, 4)[religious] + rng.normal(0, 0.3, 6)[occ])
    had_affair = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return pd.DataFrame({"rate_marriage": rate, "age": age, "yrs_married": yrs, "children": children,
                         "religious": faith[religious], "educ": educ, "occupation": jobs[occ],
                         "occupation_husb": jobs[occ_h], "had_affair": had_affair})


def party(rng: Rng, n: int = 944) -> pd.DataFrame:
    scale7 = lambda x: np.clip(np.round(x), 1, 7)  # noqa: E731
    features = {
        "TVnews": rng.integers(0, 8, n).astype(float), "selfLR": scale7(rng.normal(4.3, 1.4, n)),
        "ClinLR": scale7(rng.normal(2.9, 1.2, n)), "DoleLR": scale7(rng.normal(5.4, 1.1, n)),
        "age": np.round(np.clip(rng.normal(47, 16, n), 19, 91)), "educ": rng.integers(1, 8, n).astype(float),
        "income": rng.integers(1, 25, n).astype(float), "logpopul": np.round(rng.normal(2.5, 2.0, n), 4),
    }
    lean = sum(wk * _z(x) for wk, x in zip(rng.normal(0, 1, len(features)), features.values()))  # secret weights
    lean = _z(lean) + rng.normal(0, 0.5, n)
    vote = np.where(lean + rng.normal(0, 0.7, n) > rng.normal(0, 0.3), "Dole", "Clinton")
    cuts = np.sort(rng.normal(0, 0.9, 6))
    party_id = np.searchsorted(cuts, lean + 0.5 * (vote == "Dole"))
    return pd.DataFrame({**features, "vote": vote, "party_id": party_id})


def loans(rng: Rng, n: int = 4000) -> pd.DataFrame:
    grade = rng.choice(list("ABCDEFG"), n, p=[0.2, 0.25, 0.2, 0.15, 0.1, 0.06, 0.04])
    home = rng.choice(["RENT", "OWN", "MORTGAGE"], n, p=[0.45, 0.15, 0.4])
    purpose = rng.choice(["debt", "card", "home", "car", "medical", "business"], n)
    income = np.round(rng.lognormal(10.9, 0.5, n), -2)
    amount = np.round(rng.uniform(1_000, 35_000, n), -2)
    term = rng.choice(["36 months", "60 months"], n, p=[0.7, 0.3])
    dti = np.round(rng.gamma(4, 4, n), 2)
    emp = rng.integers(0, 11, n).astype(float)
    score = np.round(rng.normal(690, 45, n))
    logit = (-2.2 + 0.35 * (np.array([ord(g) - 65 for g in grade])) + 0.9 * (amount / income)
             + 0.03 * (dti - 16) - 0.012 * (score - 690) + 0.4 * (term == "60 months")
             + 0.5 * (purpose == "business") - 0.3 * (home == "OWN") - 0.04 * emp)
    default = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    emp[rng.random(n) < 0.1] = np.nan
    score[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({"grade": grade, "home_ownership": home, "purpose": purpose, "annual_income": income,
                         "loan_amount": amount, "term": term, "dti": dti, "emp_length": emp,
                         "credit_score": score, "default": default})


def sales(rng: Rng, n: int = 3000) -> pd.DataFrame:
    stores = {"Downtown": 120, "Airport": 80, "Mall": 150, "Suburb": 60, "Campus": 40}
    products = {"Coffee": 1.5, "Tea": 0.7, "Bagel": 1.0, "Muffin": 0.8, "Sandwich": 1.2, "Juice": 0.5}
    store = rng.choice(list(stores), n)
    product = rng.choice(list(products), n)
    month = rng.integers(1, 13, n)
    weekday = rng.choice(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], n)
    promo = rng.random(n) < 0.2
    price = np.round(rng.uniform(1.5, 6.0, n), 2)
    season = 1 + 0.25 * np.sin(2 * np.pi * (month - 3) / 12)
    weekend = np.where(np.isin(weekday, ["Sat", "Sun"]), 1.3, 1.0)
    mean = (np.vectorize(stores.get)(store) * np.vectorize(products.get)(product) * season * weekend
            * (1 + 0.4 * promo) * (4.0 / price) ** 0.5)
    sold = rng.poisson(mean * rng.lognormal(0, 0.15, n))
    return pd.DataFrame({"store": store, "product": product, "month": month, "weekday": weekday,
                         "promotion": promo.astype(int), "price": price, "num_sold": sold})


def air(rng: Rng, n: int = 3000) -> pd.DataFrame:
    hour = rng.integers(0, 24, n)
    weekday = rng.choice(["weekday", "weekend"], n, p=[5 / 7, 2 / 7])
    temp = np.round(rng.normal(15, 8, n), 1)
    humidity = np.round(rng.uniform(20, 95, n), 1)
    wind = np.round(rng.gamma(2, 1.5, n), 2)
    rush = np.exp(-((hour - 8) ** 2) / 6) + np.exp(-((hour - 18) ** 2) / 6)
    traffic = rush * np.where(weekday == "weekday", 1.0, 0.4) + rng.normal(0, 0.1, n)
    s1, s2, s3 = (rng.normal(0, 1, n) for _ in range(3))
    co = 1.0 + 2.5 * traffic - 0.15 * wind + 0.3 * s1 + rng.normal(0, 0.3, n)
    benzene = 4 + 9 * traffic - 0.4 * wind + 0.05 * temp + 0.8 * s2 + rng.normal(0, 1.0, n)
    nox = 120 + 180 * traffic - 12 * wind + 0.5 * humidity + 15 * s3 + rng.normal(0, 20, n)
    return pd.DataFrame({"hour": hour, "day_type": weekday, "temperature": temp, "humidity": humidity,
                         "wind_speed": wind, "sensor_1": np.round(co + rng.normal(0, 0.4, n), 3),
                         "sensor_2": np.round(benzene + rng.normal(0, 1.5, n), 3),
                         "sensor_3": np.round(nox + rng.normal(0, 25, n), 3),
                         "target_carbon_monoxide": np.round(co, 3), "target_benzene": np.round(benzene, 3),
                         "target_nitrogen_oxides": np.round(nox, 3)})


def weather(rng: Rng, n: int = 3000) -> pd.DataFrame:
    pressure = np.round(rng.normal(1013, 9, n), 1)
    humidity = np.round(rng.uniform(15, 100, n), 1)
    cloud = np.round(rng.uniform(0, 100, n), 0)
    wind_dir = rng.choice(["N", "E", "S", "W"], n)
    temp = np.round(rng.normal(14, 7, n), 1)
    logits = np.column_stack([
        0.15 * (pressure - 1013) - 0.03 * (cloud - 50) - 0.02 * (humidity - 55),
        0.02 * (cloud - 50) + 0.2 * np.ones(n),
        -0.12 * (pressure - 1013) + 0.05 * (humidity - 55) + 0.7 * (wind_dir == "W"),
    ])
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    label = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    cloud[rng.random(n) < 0.08] = np.nan
    df = pd.DataFrame({"pressure": pressure, "humidity": humidity, "cloud_cover": cloud, "wind_direction": wind_dir,
                       "temperature": temp})
    for k, name in enumerate(["sunny", "cloudy", "rainy"]):
        df[f"outcome_{name}"] = (label == k).astype(int)
    return df
