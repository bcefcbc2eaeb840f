// Unit tests of libcommon's SVG plotting: ticks, labels, downsampling, rendering.
#define BOOST_TEST_MODULE report_plot
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <regex>
#include <set>

#include "cairn/plot.h"

using namespace cairn::plot;

namespace {
size_t points_attr(const std::string& svg) {
  std::smatch m;
  std::regex re("data-points=\"([0-9]+)\"");
  BOOST_REQUIRE(std::regex_search(svg, m, re));
  return std::stoul(m[1]);
}
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

BOOST_AUTO_TEST_CASE(linear_ticks_are_nice) {
  Ticks t = linear_ticks(0, 10, 6);
  BOOST_TEST(t.step == 2.0);
  BOOST_TEST(t.values.size() == 6u);
  BOOST_TEST(t.values.front() == 0.0);
  BOOST_TEST(t.values.back() == 10.0);
  Ticks u = linear_ticks(0.13, 0.97, 6);
  BOOST_TEST(u.step == 0.2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(u.values.front() == 0.2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(u.values.back() == 0.8, boost::test_tools::tolerance(1e-12));
  Ticks flat = linear_ticks(5, 5, 6);  // a constant series still gets an axis
  BOOST_TEST(flat.values.size() >= 2u);
}

BOOST_AUTO_TEST_CASE(log_ticks_decades_narrow_ranges_and_bytes) {
  Ticks t = log_ticks(1, 1e6);
  BOOST_TEST(t.values.size() == 7u);
  BOOST_TEST(t.values[3] == 1000.0);
  Ticks narrow = log_ticks(2.5, 11);  // a loss curve: 3, 4, ..., 10
  BOOST_TEST(narrow.values.front() == 3.0);
  BOOST_TEST(narrow.values.back() == 10.0);
  Ticks bytes = log_ticks(8, 1 << 30, 2, 10);  // message sizes: thinned powers of two
  BOOST_TEST(bytes.values.size() <= 10u);
  BOOST_TEST(bytes.values.size() >= 5u);
  for (double v : bytes.values) BOOST_TEST(std::fabs(std::log2(v) - std::round(std::log2(v))) < 1e-9);
}

BOOST_AUTO_TEST_CASE(values_get_units_and_prefixes) {
  BOOST_TEST(format_value(1234567, "tok/s") == "1.23 Mtok/s");
  BOOST_TEST(format_value(0.0021, "s") == "2.1 ms");
  BOOST_TEST(format_value(65536, "B") == "64 KiB");
  BOOST_TEST(format_value(8, "B") == "8 B");
  BOOST_TEST(format_value(3.14159, "") == "3.14");
  BOOST_TEST(format_value(52.5, "%") == "52.5%");
  BOOST_TEST(format_value(181.2, "GB/s") == "181 GB/s");
  BOOST_TEST(format_value(NAN, "s") == "n/a");
  std::vector<std::string> lr = tick_labels(linear_ticks(0, 6e-4, 6), "", Scale::Linear);
  BOOST_TEST(lr.front() == "0");
  BOOST_TEST(lr[1] == "1e-4");
  std::vector<std::string> toks = tick_labels(linear_ticks(0, 2.5e6, 5), "tok/s", Scale::Linear);
  BOOST_TEST(toks.back() == "2.5M");
  std::vector<std::string> sizes = tick_labels(log_ticks(1024, 1 << 20, 2, 6), "B", Scale::Log);
  BOOST_TEST(sizes.front() == "1 KiB");
  BOOST_TEST(sizes.back() == "1 MiB");
}

BOOST_AUTO_TEST_CASE(downsampling_keeps_spikes_and_ends) {
  const size_t n = 100000;
  std::vector<double> x(n), y(n);
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 0.01);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<double>(i);
    y[i] = 3.0 + noise(rng);
  }
  y[55555] = 40.0;  // a loss spike
  y[77777] = -5.0;  // and a dip
  std::vector<size_t> keep = downsample_minmax(x, y, 500);
  BOOST_TEST(keep.size() <= 4u * 500u + 2u);
  BOOST_TEST(keep.size() >= 500u);
  BOOST_TEST(keep.front() == 0u);
  BOOST_TEST(keep.back() == n - 1);
  BOOST_TEST(std::count(keep.begin(), keep.end(), 55555u) == 1);
  BOOST_TEST(std::count(keep.begin(), keep.end(), 77777u) == 1);
  BOOST_TEST(std::is_sorted(keep.begin(), keep.end()));
  std::vector<size_t> small = downsample_minmax({1, 2, 3}, {1, 2, 3}, 500);
  BOOST_TEST(small.size() == 3u);
}

BOOST_AUTO_TEST_CASE(line_chart_renders_series_legend_and_spike) {
  Chart c;
  c.id = "loss";
  c.title = "loss <vs> step & more";
  c.x.label = "step";
  c.y.label = "loss";
  c.y.scale = Scale::Log;
  Series a, b;
  a.name = "run-a";
  b.name = "run-b";
  for (int i = 1; i <= 20000; ++i) {
    a.x.push_back(i);
    a.y.push_back(10.0 / std::sqrt(i) + 2.0);
    b.x.push_back(i);
    b.y.push_back(i == 12345 ? 50.0 : 9.0 / std::sqrt(i) + 2.1);
  }
  b.y[100] = NAN;   // a gap
  b.y[101] = -1.0;  // not drawable on a log axis: skipped, no crash
  c.series = {a, b};
  c.refs.push_back({false, 2.0, "floor"});
  c.markers.push_back({"skipped", {500, 600}});
  std::string svg = render_svg(c);
  BOOST_TEST(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0u);
  BOOST_TEST(svg.find("</svg>") == svg.size() - 6);
  BOOST_TEST(svg.find("loss &lt;vs&gt; step &amp; more") != std::string::npos);
  BOOST_TEST(svg.find("run-a") != std::string::npos);
  BOOST_TEST(svg.find("nan") == std::string::npos);
  BOOST_TEST(svg.find("inf") == std::string::npos);
  size_t pts = points_attr(svg);
  BOOST_TEST(pts > 1000u);
  BOOST_TEST(pts < 12000u);  // downsampled: far fewer than the 40000 inputs
  BOOST_TEST(count(svg, "<g") == count(svg, "</g>"));
  // The spike's y maps to the top of the data range: the drawn path reaches near the top edge.
  BOOST_TEST(svg.find("skipped") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(empty_chart_says_no_data) {
  Chart c;
  c.id = "empty";
  c.title = "nothing";
  std::string svg = render_svg(c);
  BOOST_TEST(points_attr(svg) == 0u);
  BOOST_TEST(svg.find("no data") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(stacked_area_and_bars) {
  Chart c;
  c.id = "breakdown";
  c.title = "step time";
  c.y.unit = "s";
  Stack st;
  st.names = {"forward", "backward"};
  st.layers.resize(2);
  for (int i = 0; i < 5000; ++i) {
    st.x.push_back(i);
    st.layers[0].push_back(0.1);
    st.layers[1].push_back(0.2);
  }
  c.stack = st;
  std::string svg = render_svg(c);
  BOOST_TEST(points_attr(svg) > 0u);
  BOOST_TEST(svg.find("forward") != std::string::npos);

  BarChart bars;
  bars.id = "bars";
  bars.title = "per run";
  bars.categories = {"a", "b", "c"};
  bars.groups = {{"fwd", {1, 2, 3}, ""}, {"bwd", {2, 3, NAN}, ""}};
  bars.stacked = true;
  bars.horizontal = true;
  bars.value_axis.label = "time";
  bars.value_axis.unit = "s";
  std::string b = render_svg(bars);
  BOOST_TEST(points_attr(b) == 5u);  // the NaN bar is not drawn
  BOOST_TEST(count(b, "<g") == count(b, "</g>"));
  bars.stacked = false;
  bars.horizontal = false;
  BOOST_TEST(points_attr(render_svg(bars)) == 5u);
}

BOOST_AUTO_TEST_CASE(escaping) {
  BOOST_TEST(xml_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  BOOST_TEST(xml_escape(std::string("x\x01y")) == "xy");
  BOOST_TEST(xml_escape("caf\xC3\xA9 \xC2\xB5s") == "caf\xC3\xA9 \xC2\xB5s");  // valid UTF-8 kept
  BOOST_TEST(xml_escape("a\xA6"
                        "b\xE2\x82") == "a\xEF\xBF\xBD"
                                        "b\xEF\xBF\xBD\xEF\xBF\xBD");
  BOOST_TEST(valid_utf8("ok\xFF") == "ok\xEF\xBF\xBD");  // invalid replaced
}

BOOST_AUTO_TEST_CASE(palette_does_not_repeat_for_many_series) {
  // A nightly comparing 50 runs: every series its own colour (the ten-colour palette repeated from the eleventh).
  std::set<std::string> seen;
  for (size_t i = 0; i < 50; ++i) {
    const std::string& c = cairn::plot::palette_color(i);
    BOOST_TEST(c.size() == 7u);
    BOOST_TEST(c[0] == '#');
    seen.insert(c);
  }
  BOOST_TEST(seen.size() == 50u);
  BOOST_TEST(cairn::plot::palette_color(0) == "#1f77b4");  // the first ten stay Tableau's
}
