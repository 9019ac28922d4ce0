/* ---- float64 sin/cos with the C library's bits, vectorizable (trig_math.py). ---- */
/* KSC_MA(a, b, c): a * b + c where glibc's FMA build of sin/cos fuses it (compiled by gcc
   with -mfma: a product with only additions and subtractions as users is fused into
   each), or rounded twice ("#define KSC_MA(a, b, c) ((a) * (b) + (c))" first). */
#ifndef KSC_MA
#define KSC_MA(a, b, c) fma(a, b, c)
#endif
/* sin(k/128) and cos(k/128), k = 0..109, each as a double and a correction (glibc's
   table). */
static const uint64_t KSC_TAB[512] = {   /* (zeros after: any index is in bounds) */
  0x0000000000000000ull, 0x0000000000000000ull, 0x3ff0000000000000ull, 0x0000000000000000ull,
  0x3f7fffeaaaaeeeefull, 0xbc1e45e2ec67b77cull, 0x3fefffc000155552ull, 0x3c8f4a01a0196daeull,
  0x3f8fffaaaaeeeed5ull, 0xbc02ab639a9f0777ull, 0x3fefff000155549full, 0x3c828a28a03a5ef3ull,
  0x3f97ff7001033255ull, 0x3bfefe2b51527336ull, 0x3feffdc006bff7e6ull, 0x3c8ae6dae86977bdull,
  0x3f9ffeaaaeeee86full, 0xbc3cd406fb224ae2ull, 0x3feffc00155527d3ull, 0xbc83b54492d89b5bull,
  0x3fa3feb2b12d45d5ull, 0x3c34ec54203d1c11ull, 0x3feff9c03414a7baull, 0x3c6991f4be6c59bfull,
  0x3fa7fdc01032fba9ull, 0xbc4599bdf46e997aull, 0x3feff7006bfdf99full, 0xbc78b3b560648d5full,
  0x3fabfc6d78586dacull, 0x3c18e4fd03dbf236ull, 0x3feff3c0c8103a31ull, 0x3c74856dbddc0e66ull,
  0x3faffaaaeeed4edbull, 0xbc42d16d32684b69ull, 0x3feff0015549f4d3ull, 0x3c8328387b99426full,
  0x3fb1fc343d808befull, 0xbc5f3d32e6f3be4full, 0x3fefebc222a8ef9full, 0x3c57934934f54c77ull,
  0x3fb3facb12d1755bull, 0xbc5921915299468cull, 0x3fefe7034129ef6full, 0xbc6cbf4337c96f97ull,
  0x3fb5f911fd10b737ull, 0xbc50184f02be9102ull, 0x3fefe1c4c3c873ebull, 0xbc35a9c9057c4a02ull,
  0x3fb7f701032550e4ull, 0x3c3afc2d1800501aull, 0x3fefdc06bf7e6b9bull, 0x3c831902b535f8dbull,
  0x3fb9f4902d55d1f9ull, 0x3c52696d7eac1dc1ull, 0x3fefd5c94b43e000ull, 0xbc62e768cb4f92f9ull,
  0x3fbbf1b78568391dull, 0x3c5e91841dea4cc8ull, 0x3fefcf0c800e99b1ull, 0x3c6ea3d786d186acull,
  0x3fbdee6f16c1cce6ull, 0xbc450f8e2fb71673ull, 0x3fefc7d078d1bc88ull, 0x3c8075d2447db685ull,
  0x3fbfeaaeee86ee36ull, 0xbc4afcb2bcc6f03bull, 0x3fefc015527d5bd3ull, 0x3c8b68f35094efb8ull,
  0x3fc0f3378ddd71d1ull, 0x3c6d8468724f0f9eull, 0x3fefb7db2bfe0695ull, 0x3c821dadf4f65ab1ull,
  0x3fc1f0d3d7afceafull, 0xbc66ef95099769a5ull, 0x3fefaf22263c4bd3ull, 0xbc552ace133a2769ull,
  0x3fc2ee285e4ab88full, 0xbc6e4d0f05dee058ull, 0x3fefa5ea641c36f2ull, 0x3c404da6ed17cc7cull,
  0x3fc3eb312c5d66cbull, 0x3c647d666b66cb91ull, 0x3fef9c340a7cc428ull, 0x3c8c5b6b063b7462ull,
  0x3fc4e7ea4dc5f27bull, 0x3c5949db2ac072fcull, 0x3fef91ff40374d01ull, 0xbc67d03f4d3a9e4cull,
  0x3fc5e44fcfa126f3ull, 0xbc66f443063f89b6ull, 0x3fef874c2e1eecf6ull, 0xbc8c6514e1332b16ull,
  0x3fc6e05dc05a4d4cull, 0xbbd32c5c8b81c940ull, 0x3fef7c1afeffde24ull, 0xbc78f55bc47540b1ull,
  0x3fc7dc102fbaf2b5ull, 0x3c45ab50e23c97c3ull, 0x3fef706bdf9ece1cull, 0xbc8698c80c36dcb4ull,
  0x3fc8d7632efaa944ull, 0xbc620fa262cbb953ull, 0x3fef643efeb82acdull, 0x3c76b00ac1fe28acull,
  0x3fc9d252d0cec312ull, 0x3c59c43d80b1137dull, 0x3fef57948cff6797ull, 0x3c6e3a0d3e03b1d5ull,
  0x3fcaccdb297a0765ull, 0xbc59883b57d6cdebull, 0x3fef4a6cbd1e3a79ull, 0x3c813df0edaebb57ull,
  0x3fcbc6f84edc6199ull, 0x3c69c1a56a7b0cabull, 0x3fef3cc7c3b3d16eull, 0xbc621a3ad28a3494ull,
  0x3fccc0a6588289a3ull, 0xbc6868d09bc87c6bull, 0x3fef2ea5d753ffedull, 0x3c8cc4215f56d583ull,
  0x3fcdb9e15fb5a5d0ull, 0xbc632e20d6cc6fc2ull, 0x3fef20073086649full, 0x3c7b940416c1984bull,
  0x3fceb2a57f8ae5a3ull, 0xbc60be06af572cebull, 0x3fef10ec09c5873bull, 0x3c8d9072762c1283ull,
  0x3fcfaaeed4f31577ull, 0xbc615d88508e32b8ull, 0x3fef01549f7deea1ull, 0x3c8d3c1e99e5cafdull,
  0x3fd0515cbf65155cull, 0xbc79b8c29dfd8ec8ull, 0x3feef141300d2f26ull, 0xbc82aa1b08ded372ull,
  0x3fd0cd00cef36436ull, 0xbc79fb0a0c93e2b5ull, 0x3feee0b1fbc0f11cull, 0xbc4bfd2380bbc3b1ull,
  0x3fd14861aa94ddebull, 0xbc6be881b5b615a4ull, 0x3feecfa744d5efa1ull, 0xbc556d0a4af541d0ull,
  0x3fd1c37d64c6b876ull, 0x3c746076fe0dcff5ull, 0x3feebe214f76efa8ull, 0xbc802f9f12ba543eull,
  0x3fd23e52111aaf36ull, 0xbc74f080334eff18ull, 0x3feeac2061bbaf4full, 0x3c62c1d53e94658dull,
  0x3fd2b8ddc43eb49full, 0x3c61553899f2d807ull, 0x3fee99a4c3a7cd83ull, 0xbc82264b1bc53ce8ull,
  0x3fd3331e94049f87ull, 0x3c7e0cb6b40c302cull, 0x3fee86aebf29a9edull, 0x3c89397afdbb58a7ull,
  0x3fd3ad129769d3d8ull, 0x3c003d5504878398ull, 0x3fee733ea0193d40ull, 0xbc86428b3546ce13ull,
  0x3fd426b7e69ee697ull, 0xbc7f09c75705c59full, 0x3fee5f54b436e9d0ull, 0x3c87eb0fd02fc8bcull,
  0x3fd4a00c9b0f3d20ull, 0x3c7823ba6bb08eadull, 0x3fee4af14b2a449cull, 0xbc868ca02e8a6833ull,
  0x3fd5190ecf68a77aull, 0x3c7b357155eef0f3ull, 0x3fee3614b680d6a5ull, 0xbc727793aa015237ull,
  0x3fd591bc9fa2f597ull, 0x3c67c74bac3fe0cbull, 0x3fee20bf49acd6c1ull, 0xbc5660aec7ef636cull,
  0x3fd60a1429078775ull, 0x3c5b1fd80ba89133ull, 0x3fee0af15a03dbceull, 0x3c5fe8e702771ae6ull,
  0x3fd682138a38d7f7ull, 0xbc7d889202444aadull, 0x3fedf4ab3ebd875eull, 0xbc8e2d8a7e6736c4ull,
  0x3fd6f9b8e33a0255ull, 0x3c742bc14ee9da0dull, 0x3feddded50f228d6ull, 0xbc6e80c8d42ba2bfull,
  0x3fd7710255764214ull, 0xbc66ead7314bb6ceull, 0x3fedc6b7eb995912ull, 0x3c54b364776dcd35ull,
  0x3fd7e7ee03c86d4eull, 0xbc7b63bcdabf5af2ull, 0x3fedaf0b6b888e83ull, 0x3c8a249e2b5e5ceaull,
  0x3fd85e7a12826949ull, 0x3c78a40e9b5face0ull, 0x3fed96e82f71a9dcull, 0x3c8ff61bd5d2039dull,
  0x3fd8d4a4a774992full, 0x3c744a02ea766326ull, 0x3fed7e4e97e17b4aull, 0xbc63b770352bed94ull,
  0x3fd94a6be9f546c5ull, 0xbc769ce13e683f58ull, 0x3fed653f073e4040ull, 0xbc876236434bec37ull,
  0x3fd9bfce02e80510ull, 0x3c709e39a320b0a4ull, 0x3fed4bb9e1c619e0ull, 0x3c8f34bb77858f61ull,
  0x3fda34c91cc50ccaull, 0xbc5a310e3b50cecdull, 0x3fed31bf8d8d7c06ull, 0x3c7e60dd3089cbddull,
  0x3fdaa95b63a09277ull, 0xbc66293eb13c0381ull, 0x3fed1750727d94f0ull, 0x3c80d52b1ec1a48eull,
  0x3fdb1d8305321617ull, 0xbc7ae242cb99f519ull, 0x3fecfc6cfa52ad9full, 0x3c88b5b5508f2a0dull,
  0x3fdb913e30dbac43ull, 0xbc7e38ad2f6c3ff1ull, 0x3fece115909a82e5ull, 0x3c81f139bb31109aull,
  0x3fdc048b17b140a3ull, 0x3c619fe6757e9fa7ull, 0x3fecc54aa2b2972eull, 0x3c64ee162ba83a98ull,
  0x3fdc7767ec7fd19eull, 0xbc5eb14d1a3d5826ull, 0x3feca90c9fc67d0bull, 0xbc646a81485e3462ull,
  0x3fdce9d2e3d4a51full, 0xbc62fc8a12dae298ull, 0x3fec8c5bf8ce1a84ull, 0x3c7ab3d1a1590123ull,
  0x3fdd5bca34047661ull, 0x3c728a44a75fc29cull, 0x3fec6f39208be53bull, 0xbc8741dbfbaadb42ull,
  0x3fddcd4c15329c9aull, 0x3c70d4c6e171fd9aull, 0x3fec51a48b8b175eull, 0xbc61bbb43b9aa880ull,
  0x3fde3e56c1582a69ull, 0xbc50a4821099f88full, 0x3fec339eb01ddd81ull, 0xbc8caaf5ee82c5c0ull,
  0x3fdeaee8744b05f0ull, 0xbc5789b43c9b027dull, 0x3fec1528065b7d50ull, 0xbc8892111312e828ull,
  0x3fdf1eff6bc4f97bull, 0x3c717212f8a7525cull, 0x3febf641081e7536ull, 0x3c8b7bd71628a9a1ull,
  0x3fdf8e99e76abc97ull, 0x3c59d950af2d00a3ull, 0x3febd6ea310294f5ull, 0x3c731bbcc88c109dull,
  0x3fdffdb628d2f57aull, 0x3c6f4a992e905b6aull, 0x3febb723fe630f32ull, 0x3c772bd2452d0a39ull,
  0x3fe0362939c69955ull, 0xbc82d8cd78397b01ull, 0x3feb96eeef58840eull, 0x3c545a3cc78fade0ull,
  0x3fe06d3686946e5bull, 0x3c83f5ae4538ff1bull, 0x3feb764b84b704c2ull, 0xbc8f5848c21b389bull,
  0x3fe0a4021e9e1001ull, 0xbc86f643a13914f6ull, 0x3feb553a410c104eull, 0x3c58ff7947027a16ull,
  0x3fe0da8b26b5672eull, 0xbc8a58def0bee909ull, 0x3feb33bba89c8948ull, 0x3c8ea6a51d1f6ca9ull,
  0x3fe110d0c4b69c3bull, 0x3c8d918998809981ull, 0x3feb11d04162a4c6ull, 0x3c71dd561efbc0c2ull,
  0x3fe146d21f8b7f82ull, 0x3c7bf9535e2739a8ull, 0x3feaef78930bd275ull, 0xbc7f836279746f94ull,
  0x3fe17c8e5f2eedb0ull, 0x3c635e57102e2488ull, 0x3feaccb526f69de5ull, 0x3c88fb6a8dd6b6ccull,
  0x3fe1b204acb02fddull, 0xbc5f190c70cbb5ffull, 0x3feaa98688308913ull, 0xbc0b83d607cd5070ull,
  0x3fe1e7343236574cull, 0x3c722a3fa4f41d5aull, 0x3fea85ed4373e02dull, 0x3c69be06385ec792ull,
  0x3fe21c1c1b0394cfull, 0x3c5e5b324b23aa31ull, 0x3fea61e9e72586afull, 0x3c858330e2fd453full,
  0x3fe250bb93788bbbull, 0x3c7ea3d02457bcceull, 0x3fea3d7d0352bdcfull, 0xbc868dbaeca19669ull,
  0x3fe28511c917a067ull, 0xbc801df1d9a16b70ull, 0x3fea18a729aee445ull, 0x3c395e25736c0358ull,
  0x3fe2b91dea88421eull, 0xbc8fa371db216ab0ull, 0x3fe9f368ed912f85ull, 0xbc81d200c5791606ull,
  0x3fe2ecdf279a3082ull, 0x3c8d3557e0e7e37eull, 0x3fe9cdc2e3f25e5cull, 0x3c83f99112993f62ull,
  0x3fe32054b148bc4full, 0x3c8f6b42095a135bull, 0x3fe9a7b5a36a6514ull, 0x3c8722cfcc9fa7a9ull,
  0x3fe3537db9be0367ull, 0x3c6b327e7af040f0ull, 0x3fe98141c42e1310ull, 0x3c8d1ff80488f08dull,
  0x3fe386597456282bull, 0xbc710fada93b07a8ull, 0x3fe95a67e00cb1fdull, 0xbc80befda21f862dull,
  0x3fe3b8e715a2840aull, 0xbc797653a7d2f07bull, 0x3fe93328926d9e92ull, 0xbc8bb77003600cdaull,
  0x3fe3eb25d36cd53aull, 0xbc5be570e1570fc0ull, 0x3fe90b84784ddaf7ull, 0xbc70feb10ab93b87ull,
  0x3fe41d14e4ba6790ull, 0x3c84608fd287ecf5ull, 0x3fe8e37c303d9ad1ull, 0xbc6463a4b53d4bf8ull,
  0x3fe44eb381cf386bull, 0xbc83ed6c1e6a5505ull, 0x3fe8bb105a5dc900ull, 0x3c8863e03e9474c1ull,
  0x3fe48000e431159full, 0xbc8b194a7463ed10ull, 0x3fe89241985d871full, 0x3c8c48d9c413ed84ull,
  0x3fe4b0fc46aab761ull, 0x3c20da05738cc59aull, 0x3fe869108d77a6c6ull, 0x3c7338ffe2bfe9ddull,
  0x3fe4e1a4e54ed51bull, 0xbc8a492f89b7c76aull, 0x3fe83f7dde701ca0ull, 0xbc4152cf609bc6e8ull,
  0x3fe511f9fd7b351cull, 0xbc85c0e861c48831ull, 0x3fe8158a31916d5dull, 0xbc6de8b90b8228deull,
  0x3fe541facddbb724ull, 0x3c7232c28520d391ull, 0x3fe7eb362eaa1488ull, 0x3c5a1d65a4a5959full,
  0x3fe571a6966d59b3ull, 0x3c5c843b4d0fb198ull, 0x3fe7c0827f09e54full, 0xbc6c73d6d72aee68ull,
  0x3fe5a0fc98813a12ull, 0xbc8d82e2b7d4227bull, 0x3fe7956fcd7f6543ull, 0xbc8ab276e9d45ae4ull,
  0x3fe5cffc16bf8f0dull, 0x3c896cb370eb578aull, 0x3fe769fec655211full, 0xbc6827d5cf8c68c5ull,
  0x3fe5fea4552a9e57ull, 0x3c80b6cef7ee20b7ull, 0x3fe73e30174efba1ull, 0xbc65d3ae3d94ad5full,
  0x3fe62cf49921ac79ull, 0xbc8edd9855b6241aull, 0x3fe712046fa77678ull, 0x3c8425b0a5029c81ull,
  0x3fe65aec2963e755ull, 0x3c8126f96b71053cull, 0x3fe6e57c800cf55eull, 0x3c860286dedbd0a6ull,
  0x3fe6888a4e134b2full, 0xbc86b7d37644d5e6ull, 0x3fe6b898fa9efb5dull, 0x3c715ac786ccf4b2ull,
  0x3fe6b5ce50b7821aull, 0xbc65d5158f702e0full, 0x3fe68b5a92eb6253ull, 0xbc89a91ad985f89cull,
  0x3fe6e2b77c40bde1ull, 0xbc70e729857fad53ull, 0x3fe65dc1fdeb8cbaull, 0xbc597c1b47337c77ull,
  0x3fe70f451d0a8c40ull, 0x3c697ede3885770dull, 0x3fe62fcff20191c7ull, 0x3c6d9143895756efull,
  0x3fe73b7680dea578ull, 0xbc72248306dc12a2ull, 0x3fe6018526f563dfull, 0x3c846ca5e0e432d0ull,
  0x3fe7674af6f7b524ull, 0x3c7e9d3f94ac84a8ull, 0x3fe5d2e255f1f17aull, 0x3c80314104c8892bull,
  0x3fe792c1d0041d52ull, 0xbc8abf05eeb354ebull, 0x3fe5a3e839824077ull, 0x3c8428aa2759be62ull,
  0x3fe7bdda5e28b3c2ull, 0x3c4ad1197ccd0393ull, 0x3fe574978d8e83f2ull, 0x3c8f4714af282d23ull,
  0x3fe7e893f5037959ull, 0x3c80eefbaa650c4cull, 0x3fe544f10f592ca5ull, 0xbc8e7ae8e6c7a62full,
  0x3fe812ede9ae4ba4ull, 0xbc87830adf402ddaull, 0x3fe514f57d7bf3daull, 0x3c747a108073c259ull};

static inline double ksc_d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static inline uint64_t ksc_u(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static inline double ksc_sel(uint64_t m, double a, double b) {
  return ksc_d((ksc_u(a) & m) | (ksc_u(b) & ~m));
}
static inline uint64_t ksc_mask(int c) { return (uint64_t)0 - (uint64_t)(c != 0); }

/* sin (cosine == 0) or cos of x for |x| < 105414350, every lane through one path: the
   argument a + da and whether its sine or cosine is wanted (below 0.855469 x itself;
   below 2.426265 pi/2 - |x| in two parts; else x - n pi/2 to 136 bits with the
   quadrant n), then both of glibc's kernels on it (sine: a Taylor polynomial below
   0.126, else the table's sin/cos at the nearest k/128 corrected by polynomials;
   cosine: the table), selected. Lanes at or above 105414350 give garbage: the caller
   replaces them (the library's __branred reduction, not reproduced here). */
__attribute__((always_inline)) static inline double ksc64(double x, int cosine) {
  uint64_t ux = ksc_u(x);
  uint64_t k = (ux >> 32) & 0x7fffffffu;
  double ax = fabs(x);
  /* n = round(x 2/pi), x - n pi/2 as b + db */
  double t = KSC_MA(x, 0x1.45F306DC9C883p-1, 0x1.8p52);
  double xn = t - 0x1.8p52;
  uint64_t n = ksc_u(t) & 3;
  double y = KSC_MA(-xn, -0x1.DDE973C000000p-27, KSC_MA(-xn, 0x1.921FB58000000p0, x));
  double t2 = KSC_MA(-xn, -0x1.CB3B398000000p-55, y);
  double db = KSC_MA(-xn, -0x1.CB3B398000000p-55, y - t2);
  double b = KSC_MA(-xn, -0x1.d747f23e32ed7p-83, t2);
  db = db + KSC_MA(-xn, -0x1.d747f23e32ed7p-83, t2 - b);
  /* pi/2 - |x| */
  double h = 0x1.921FB54442D18p0 - ax;
  double ha = h + 0x1.1A62633145C07p-54;
  double hda = (h - ha) + 0x1.1A62633145C07p-54;
  uint64_t mid = ksc_mask(k >= 0x3feb6000u), far = ksc_mask(k >= 0x400368fdu);
  double a, da;
  uint64_t kind, neg;       /* kind: the cosine kernel; neg: negate its result */
  if (cosine) {
    a = ksc_sel(far, b, ksc_sel(mid, ha, x));
    da = ksc_sel(far, db, ksc_sel(mid, hda, 0.0));
    kind = (far & (n + 1) & 1) | (~mid & 1);         /* n + 1 odd; or |x| < 0.855469 */
    neg = far & ksc_mask(((n + 1) >> 1) & 1);
  } else {
    a = ksc_sel(far, b, ksc_sel(mid, h, x));
    da = ksc_sel(far, db, ksc_sel(mid, 0x1.1A62633145C07p-54, 0.0));
    kind = (far & n & 1) | (mid & ~far & 1);
    neg = (far & ksc_mask((n >> 1) & 1)) | (mid & ~far & ksc_mask(ux >> 63));
  }
  double aa = fabs(a);
  double u = 0x1.8p45 + aa;
  uint64_t i = (ksc_u(u) & 127u) << 2;
  double sn = ksc_d(KSC_TAB[i]), ssn = ksc_d(KSC_TAB[i + 1]);
  double cs = ksc_d(KSC_TAB[i + 2]), ccs = ksc_d(KSC_TAB[i + 3]);
  double r = aa - (u - 0x1.8p45);
  /* glibc's do_sin(a, da) */
  double xx = a * a;
  double p = KSC_MA(KSC_MA(KSC_MA(KSC_MA(-0x1.ADDFFC2FCDF59p-26, xx, 0x1.71DE27B9A7ED9p-19),
                                  xx, -0x1.A01A019DB08B8p-13), xx, 0x1.1111111110ECEp-7),
                    xx, -0x1.5555555555555p-3);
  double taylor = a + KSC_MA(KSC_MA(p, a, -0.5 * da), xx, da);
  double ds = ksc_sel(ksc_mask(a <= 0.0), -da, da);
  double rr = r * r;
  double s = r + KSC_MA(r * rr, KSC_MA(rr, 8.33333214285722277379541354343671E-03,
                                       -1.66666666666664880952546298448555E-01), ds);
  double cpoly = KSC_MA(rr, KSC_MA(rr, 1.38888874007937613028114285595617E-03,
                                   -4.16666666666664434524222570944589E-02),
                        4.99999999999999999999950396842453E-01);
  double c = KSC_MA(r, ds, rr * cpoly);
  double cor = KSC_MA(cs, s, KSC_MA(-sn, c, KSC_MA(s, ccs, ssn)));
  double sv = ksc_d((ksc_u(sn + cor) & 0x7fffffffffffffffull) | (ksc_u(a) & (1ull << 63)));
  sv = ksc_sel(ksc_mask(fabs(a) < 0.126), taylor, sv);
  /* glibc's do_cos(a, da) */
  double dc = ksc_sel(ksc_mask(a < 0.0), -da, da);
  double rc = r + dc;
  double rcc = rc * rc;
  double sc = KSC_MA(rc * rcc, KSC_MA(rcc, 8.33333214285722277379541354343671E-03,
                                      -1.66666666666664880952546298448555E-01), rc);
  double cc = rcc * KSC_MA(rcc, KSC_MA(rcc, 1.38888874007937613028114285595617E-03,
                                       -4.16666666666664434524222570944589E-02),
                           4.99999999999999999999950396842453E-01);
  double corc = KSC_MA(-sn, sc, KSC_MA(-cs, cc, KSC_MA(-sc, ssn, ccs)));
  double cv = cs + corc;
  double v = ksc_sel(ksc_mask(kind & 1), cv, sv);
  v = ksc_sel(neg, -v, v);
  /* tiny |x|: x (sin), 1 (cos) */
  return ksc_sel(ksc_mask(k < (cosine ? 0x3e400000u : 0x3e500000u)), cosine ? 1.0 : x, v);
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8 && defined(__x86_64__)
/* gcc on x86-64 only: ksin64/kcos64 are declared SIMD functions (as ksin32, libm_trig.h).
   A clone computes ksc64 on all its lanes, then calls the C library's sin/cos for any lane
   at or above 105414350 or not finite (its large reduction is not reproduced). The scalar
   symbol is the library's function. Elsewhere the renderer keeps calling sin/cos. */
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden"))) double ksin64(double x);
__attribute__((simd("notinbranch"), const, nothrow, visibility("hidden"))) double kcos64(double x);
__attribute__((weak, visibility("hidden"))) double ksc_sin_1(double x) __asm__("ksin64");
__attribute__((weak, visibility("hidden"))) double ksc_sin_1(double x) { return sin(x); }
__attribute__((weak, visibility("hidden"))) double ksc_cos_1(double x) __asm__("kcos64");
__attribute__((weak, visibility("hidden"))) double ksc_cos_1(double x) { return cos(x); }
#define KSC_CLONE(NAME, COS, LIB, ISA, N, SYMBOL, TARGET) \
  typedef double ksc_v##N __attribute__((vector_size(8 * N))); \
  __attribute__((weak, visibility("hidden"), target(TARGET))) \
  ksc_v##N NAME##_##ISA(ksc_v##N x) __asm__(SYMBOL); \
  __attribute__((weak, visibility("hidden"), target(TARGET))) \
  ksc_v##N NAME##_##ISA(ksc_v##N x) { \
    double in[N], out[N]; \
    uint64_t bits[N]; \
    uint64_t far = 0; \
    memcpy(in, &x, sizeof in); \
    memcpy(bits, &x, sizeof bits); \
    for (int i = 0; i < N; i++) { \
      out[i] = ksc64(in[i], COS); \
      far |= (uint64_t)(((bits[i] >> 32) & 0x7fffffffu) >= 0x419921FBu); } \
    if (far) \
      for (int i = 0; i < N; i++) \
        if (((bits[i] >> 32) & 0x7fffffffu) >= 0x419921FBu) out[i] = LIB(in[i]); \
    memcpy(&x, out, sizeof x); \
    return x; }
#define KSC_CLONES(NAME, COS, LIB, STEM) \
  KSC_CLONE(NAME, COS, LIB, b, 2, "_ZGVbN2v_" STEM, "sse2") \
  KSC_CLONE(NAME, COS, LIB, c, 4, "_ZGVcN4v_" STEM, "avx") \
  KSC_CLONE(NAME, COS, LIB, d, 4, "_ZGVdN4v_" STEM, "avx2") \
  KSC_CLONE(NAME, COS, LIB, e, 8, "_ZGVeN8v_" STEM, "avx512f")
KSC_CLONES(ksc_sin, 0, sin, "ksin64")
KSC_CLONES(ksc_cos, 1, cos, "kcos64")
#undef KSC_CLONES
#undef KSC_CLONE
#endif
