import re

import pandas as pd
import pytest

from fabnb.corpus.terms import KnowledgeBase, KnowledgeBaseError, precision_level
from fabnb.data import published


@pytest.fixture(scope="module")
def kb():
    return KnowledgeBase.default()


def test_default_base_matches_table_1(kb):
    listing = pd.read_csv(published.__path__[0] + "/knowledge_base_terms.csv")
    assert len(listing) == 431  # Appendix A lists exactly Table 1's total ...
    counts = listing.groupby("category").size().to_dict()
    table1 = published.knowledge_base().set_index("category").n_terms.to_dict()
    assert counts == table1  # ... and each category's count
    assert kb.terms.term.nunique() == 428  # ASIC twice, 'functional test' and 'junction temperature' repeated
    assert kb.weights == published.knowledge_base().set_index("category").weight.to_dict()


@pytest.mark.parametrize("text,expected", [
    ("The Vth shift", ["Vth"]),
    ("an I-V curve, an I–V curve and IV curves", ["I-V curve"] * 3),
    ("13.5nm and 13.5 nm EUV", ["13.5nm", "13.5nm", "EUV"]),
    ("HfO2 and HfO₂ dielectrics", ["HfO2", "HfO2"]),
    ("gate-all-around and gate all around", ["gate-all-around"] * 2),
    ("25nm is not 5nm", ["5nm"]),
    ("rf noise and RF noise", ["noise", "RF", "noise"]),
    ("wafers, Wafer and WAFER", ["wafer"] * 3),
    ("atomic layer deposition", ["atomic layer deposition"]),  # longest term wins over 'deposition'
    ("ar and AR", ["AR"]),  # 'AR' (augmented reality) is case-sensitive: 'ar' is not it
])
def test_matching(kb, text, expected):
    assert kb.find(text).term.tolist() == expected


def test_match_offsets_point_into_the_text(kb):
    text = "Plasma etching of HfO₂ at 5 nm."
    for r in kb.find(text).itertuples():
        assert text[r.start:r.end] == r.text


def test_density_omega_and_precision_by_hand(kb):
    # 10 words; terms: 'threshold voltage' (parameters 1.7), 'leakage current' (parameters 1.7), 'EUV' (processes 1.6)
    text = "The threshold voltage and leakage current under EUV exposure were low."
    a = kb.analyse(text)
    found = kb.find(text).term.tolist()
    assert found == ["threshold voltage", "leakage current", "EUV", "exposure"]  # exposure: manufacturing 1.5
    assert a.n_words == 11
    assert a.technical_density == pytest.approx((1.7 + 1.7 + 1.6 + 1.5) / 11)
    assert a.high_weight_presence == pytest.approx(1.7 * 2 + 1.6 * 1)
    assert a.precision_level == "high"  # density 0.59 > 0.20
    assert a.dominant_category == "parameters"


def test_omega_counts_distinct_terms(kb):
    a = kb.analyse("Vth Vth Vth " + "word " * 100)
    assert a.high_weight_presence == pytest.approx(1.7)


def test_multi_category_term_counts_once_at_higher_weight(kb):
    f = kb.find("an ASIC")
    assert set(f.categories.item()) == {"devices", "applications"} and f.weight.item() == 1.4


def test_precision_thresholds():
    assert precision_level(0.2, 8) == "medium"  # both strict inequalities
    assert precision_level(0.2001, 0) == "high"
    assert precision_level(0.0, 8.01) == "high"
    assert precision_level(0.1201, 0) == "medium"
    assert precision_level(0.12, 4) == "low"


def test_own_knowledge_base_csv_and_yaml(tmp_path):
    csv = tmp_path / "kb.csv"
    csv.write_text("term,category,weight\nbeta blocker,drugs,1.5\nQT interval,measures,2.0\n")
    kb = KnowledgeBase.from_file(csv, high_weight_categories=("measures",))
    a = kb.analyse("A beta-blocker prolongs the QT interval.")
    assert a.high_weight_presence == 2.0 and a.dominant_category == "measures"
    yml = tmp_path / "kb.yaml"
    yml.write_text("drugs:\n  weight: 1.5\n  terms: [beta blocker, statin]\n")
    assert KnowledgeBase.from_file(yml).find("Statins and beta blockers").term.tolist() == ["statin", "beta blocker"]


@pytest.mark.parametrize("content,message", [
    ("term,category\nx,y\n", "missing column"),
    ("term,category,weight\nx,y,heavy\n", "row 1 ('x'): weight 'heavy' is not a number"),
    ("term,category,weight\nx,,1\n", "row 1 ('x'): empty category"),
    ("term,category,weight\nx,y,1\nz,y,2\n", "category 'y' has several weights"),
])
def test_bad_knowledge_base(tmp_path, content, message):
    path = tmp_path / "kb.csv"
    path.write_text(content)
    with pytest.raises(KnowledgeBaseError, match=re.escape(message)):
        KnowledgeBase.from_file(path)


def test_analyse_frame_adds_columns(kb):
    out = kb.analyse_frame(pd.DataFrame({"id": [1], "text": ["CMP of copper"]}))
    assert {"technical_density", "precision_level", "terms[manufacturing]"} <= set(out.columns)
    assert out["terms[materials]"].item() == pytest.approx(1.3)


def test_highlight_escapes_hostile_text(kb):
    out = str(kb.highlight('<img src=x onerror="alert(1)"> EUV <script>x</script>'))
    assert "<img" not in out and "<script>" not in out and "&lt;script&gt;" in out
    assert '<mark class="fabnb-term fabnb-processes" title="EUV: processes">EUV</mark>' in out


def test_a_users_corpus_gets_its_levels_from_its_own_knowledge_base(tmp_path):
    """Seen: every document of a user's corpus came out "low". A base of another domain names its own categories,
    so Eq. 1's high-weight pair (parameters, processes) was absent and omega_h was 0 whatever the text; now the
    base's two heaviest categories are that pair."""
    csv = tmp_path / "chemistry.csv"
    csv.write_text("term,category,weight\n" + "".join(f"{t},reagents,1.6\n" for t in (
        "sulfuric acid", "sodium hydroxide", "acetone", "ethanol", "toluene")) +
        "spectrometer,instruments,1.5\nburette,instruments,1.5\nsample,general,1.0\n")
    kb = KnowledgeBase.from_file(csv)
    assert kb.high_weight_categories == ("reagents", "instruments")
    filler = " ".join(["the mixture was left to stand and then it was checked again"] * 12)
    text = f"Add sulfuric acid, sodium hydroxide, acetone, ethanol and toluene in turn. {filler}"
    documents = pd.DataFrame({"doc_id": ["d1"], "text": [text]})
    measured = kb.analyse_frame(documents)
    assert measured.loc[0, "technical_density"] < 0.12  # not dense: the level comes from omega_h
    assert measured.loc[0, "high_weight_presence"] == pytest.approx(1.6 * 5)
    assert measured.loc[0, "precision_level"] == "medium"
    assert KnowledgeBase.default().analyse_frame(documents).loc[0, "precision_level"] == "low"
